"""Tensor-parallel layers whose communication runs through weft, with autograd.

Shapes (W ranks, t tokens per rank, H hidden, F ffn):
    ColumnParallelLinear(H, F): weight [F/W, H].
        sequence parallel: x [t, H] -> y [W t, F/W]   forward ag_gemm;  backward dx by gemm_rs,
                           dW = dy^T gather(x): with save_gathered_input, gather(x) as the
                           forward's ag_gemm gathered it (kept until the backward: [W t, H]
                           instead of x's [t, H]); without, gathered again by torch.distributed
                           while dx is computed
        otherwise:         x [T, H] -> y [T, F/W]     forward torch.mm; backward dx by gemm_ar
    RowParallelLinear(F, H): weight [H, F/W].
        sequence parallel: y [W t, F/W] -> z [t, H]   forward gemm_rs;  backward dy by ag_gemm,
                           dW = gather(dz)^T y with gather(dz) as that ag_gemm gathered it
        otherwise:         y [T, F/W] -> z [T, H]     forward gemm_ar;  backward torch.mm
    TensorParallelMLP(H, F): ColumnParallelLinear, GELU, RowParallelLinear.
FP8 (fp8=weft.torch.fp8.Float8Recipe("tensorwise" | "rowwise"); default None: bf16 throughout):
    forward: the input and the weight shard quantized to e4m3 each call, scales from their amax
        (fp8.py), and the layer's product through the same weft op with the FP8 operands and their
        scales (bf16 result). Tensor-wise, a sequence-parallel column layer's input has one scale
        over every rank's x (an amax all-reduce: the gathered A's scale); every other scale is the
        rank's own. Where weft's op declines that FP8 product (a strategy that would copy FP8
        rows, or has no FP8 plan), the same FP8 product runs with torch's
        pieces (FP8 bytes gathered by torch.distributed, torch._scaled_mm, torch.distributed's
        reduction of bf16 partial sums), with one warning naming weft's reason: the numbers are
        the recipe's whichever way the communication runs.
    backward (Float8Recipe(..., backward="fp8")): the input gradients' products (dx of a column
        layer: gemm_rs / gemm_ar; dy of a row layer: ag_gemm) in FP8 through the same ops: the output
        gradient in e5m2 (per row, or one scale; gathered: one over every rank's) times the weight's
        transpose in e4m3 (a contiguous copy, quantized per its rows: per input feature); the weight
        gradients as below, in bf16.
    backward (the default, backward="bf16"): the bf16 backward above (the same weft ops) on the dequantized FP8 operands the
        forward multiplied (the e4m3 input and weight times their scales, in bf16): the gradient
        of the FP8 product with quantization passed straight through; no e5m2 gradients yet. Kept
        for the backward: the FP8 input (half bf16's bytes) and the FP8 weight shard with their
        scales; a sequence-parallel dW gathers the dequantized input again (bf16, beside dx's op)
        unless save_gathered_input keeps the FP8 rows the forward gathered.
Each product of a backward that multiplies by the weight itself (dy @ W) passes W.t() to the op: a
view the op reads as it lies (b in layout kn, see weft/torch/ops.py), so no backward copies a weight.
At world 1 nothing is communicated: every product is torch.mm on the tensors as they are, and the
ops are the GEMM alone.
The same layers written with torch.mm and torch.distributed are in weft/torch/plain.py (the
sequential equivalent of each layer, forward and backward); tests and weft.benchmark compare the two.
"""

import torch

import weft

from . import fp8 as _fp8
from .comm import all_gather_rows, world_size
from .ops import ag_gemm, gemm_ar, gemm_rs


class _ColumnParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, sequence_parallel, strategy, save_gathered_input, fp8=None):
        ctx.sequence_parallel, ctx.strategy, ctx.fp8 = sequence_parallel, strategy, fp8 is not None
        ctx.recipe, ctx.fp8_backward = fp8, fp8 is not None and fp8.backward == "fp8"
        if fp8 is not None:
            return _column_fp8_forward(ctx, x, weight, sequence_parallel, strategy, save_gathered_input, fp8)
        # The gathered input for dW, from the op that gathered it (AsyncTP's return_A), where the
        # caller lets it live until the backward and dW is wanted; at world 1 it is x itself.
        ctx.saved_gathered = sequence_parallel and save_gathered_input and ctx.needs_input_grad[1] and world_size() > 1
        if ctx.saved_gathered:
            y, gathered = ag_gemm(x, weight, strategy, return_a=True)
            ctx.save_for_backward(gathered, weight)
            return y
        ctx.save_for_backward(x, weight)
        return ag_gemm(x, weight, strategy) if sequence_parallel else torch.mm(x, weight.t())

    @staticmethod
    def backward(ctx, dy):
        saved, weight = _saved_operands(ctx, dy.dtype)
        dy = dy.contiguous()
        dx = dw = None
        # dW needs the gathered input: kept from the forward, or gathered again, its all-gather
        # (torch's stream) running while dx is computed (weft's ops on the current stream), as
        # Megatron overlaps it with the dgrad GEMM.
        gathered, gathering = (saved, None) if ctx.saved_gathered else (None, None)
        if ctx.needs_input_grad[1] and ctx.sequence_parallel and not ctx.saved_gathered:
            gathered, gathering = all_gather_rows(saved, async_op=True)
        if ctx.needs_input_grad[0] and ctx.fp8_backward:
            # The FP8 backward: dy in e5m2 times the weight's transpose in e4m3 (a copy: the FP8
            # GEMM reads B K-major), summed over ranks by the same op.
            qdy, qwt = _fp8.input_gradient_operands(dy, ctx.saved_tensors[4], ctx.recipe)
            if world_size() == 1:
                dx = _fp8.scaled_mm(qdy, qwt)
            else:
                dx = _fp8.product("gemm_rs" if ctx.sequence_parallel else "gemm_ar", qdy, qwt, ctx.strategy)[0]
        elif ctx.needs_input_grad[0]:
            # dy @ weight summed over ranks (each holds F/W of the features): B = weight^T [H, F/W],
            # passed as the view weight.t() (layout kn: read in place, not copied).
            if world_size() == 1:
                dx = torch.mm(dy, weight)
            else:
                dx = gemm_rs(dy, weight.t(), ctx.strategy) if ctx.sequence_parallel else gemm_ar(dy, weight.t(), ctx.strategy)
        if ctx.needs_input_grad[1]:
            if gathering is not None:
                gathering.wait()
            dw = torch.mm(dy.t(), gathered if ctx.sequence_parallel else saved)
        return dx, dw, None, None, None, None


class _RowParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, weight, sequence_parallel, strategy, fp8=None):
        ctx.sequence_parallel, ctx.strategy, ctx.fp8 = sequence_parallel, strategy, fp8 is not None
        ctx.recipe, ctx.fp8_backward = fp8, fp8 is not None and fp8.backward == "fp8"
        op = "gemm_rs" if sequence_parallel else "gemm_ar"
        if fp8 is not None:
            # Each rank's own scales (its partial product is its own; the op reduces bf16 sums).
            qy, qw = _fp8.quantize(y, fp8), _fp8.quantize(weight, fp8)
            # The FP8 backward quantizes the weight's transpose from the weight itself (a parameter:
            # kept anyway).
            ctx.save_for_backward(qy.data, qy.scale, qw.data, qw.scale, *([weight] if ctx.fp8_backward else []))
            return _fp8.product(op, qy, qw, strategy)[0]
        ctx.save_for_backward(y, weight)
        return gemm_rs(y, weight, strategy) if sequence_parallel else gemm_ar(y, weight, strategy)

    @staticmethod
    def backward(ctx, dz):
        y, weight = _saved_operands(ctx, dz.dtype)
        dz = dz.contiguous()
        dy = dw = None
        gathered = None  # gather(dz), for dW: from the ag_gemm that computes dy, else gathered here
        if ctx.needs_input_grad[0] and ctx.fp8_backward:
            # The FP8 backward: gather(dz) in e5m2 (tensor-wise: one scale over every rank's dz, the
            # gathered A's) times the weight's transpose in e4m3; dW's gather(dz) stays bf16.
            gathers = ctx.sequence_parallel and world_size() > 1
            qdz, qwt = _fp8.input_gradient_operands(dz, ctx.saved_tensors[4], ctx.recipe, across_ranks=gathers)
            dy = _fp8.product("ag_gemm", qdz, qwt, ctx.strategy)[0] if gathers else _fp8.scaled_mm(qdz, qwt)
        elif ctx.needs_input_grad[0]:
            # gather(dz) @ weight: B = weight^T [F/W, H], passed as the view weight.t() (layout kn).
            if ctx.sequence_parallel and world_size() > 1:
                if ctx.needs_input_grad[1]:
                    dy, gathered = ag_gemm(dz, weight.t(), ctx.strategy, return_a=True)
                else:
                    dy = ag_gemm(dz, weight.t(), ctx.strategy)
            else:
                dy = torch.mm(dz, weight)
        if ctx.needs_input_grad[1]:
            if gathered is None:
                gathered = all_gather_rows(dz) if ctx.sequence_parallel else dz
            dw = torch.mm(gathered.t(), y)
        return dy, dw, None, None, None


def _column_fp8_forward(ctx, x, weight, sequence_parallel, strategy, save_gathered_input, recipe):
    """The column-parallel product in FP8 (module docstring). Sequence parallel: x quantized with
    one scale over every rank's x where tensor-wise (the gathered A's), through ag_gemm; otherwise
    the local GEMM (torch._scaled_mm, as bf16's torch.mm)."""
    qx = _fp8.quantize(x, recipe, across_ranks=sequence_parallel)
    qw = _fp8.quantize(weight, recipe)
    if sequence_parallel:
        y, gathered = _fp8.product("ag_gemm", qx, qw, strategy)
    else:
        y, gathered = _fp8.scaled_mm(qx, qw), None
    # The gathered FP8 input (half bf16's bytes) where the product gathered it here and the caller
    # keeps it for dW; else this rank's, gathered again in the backward.
    ctx.saved_gathered = gathered is not None and save_gathered_input and ctx.needs_input_grad[1] and world_size() > 1
    kept = gathered if ctx.saved_gathered else qx
    ctx.save_for_backward(kept.data, kept.scale, qw.data, qw.scale, *([weight] if ctx.fp8_backward else []))
    return y


def _saved_operands(ctx, dtype):
    """The (input, weight) a backward multiplies by: as saved, or where the forward ran in FP8 the
    dequantized FP8 operands it multiplied (in the gradient's dtype)."""
    if not ctx.fp8:
        return ctx.saved_tensors
    x_data, x_scale, w_data, w_scale = ctx.saved_tensors[:4]
    return _fp8.Float8(x_data, x_scale).dequantize(dtype), _fp8.Float8(w_data, w_scale).dequantize(dtype)


def _fp8_recipe(fp8):
    if fp8 is not None and not isinstance(fp8, _fp8.Float8Recipe):
        raise TypeError(f"fp8 must be a weft.torch.fp8.Float8Recipe (or None: bf16), got {type(fp8).__name__}")
    return fp8


def _init_weight(out_features, in_features, device, dtype):
    weight = torch.empty((out_features, in_features), device=device, dtype=dtype)
    torch.nn.init.normal_(weight, std=in_features ** -0.5)
    return torch.nn.Parameter(weight)


def _require_strategy(strategy, sequence_parallel, who):
    """Refuses, when the layer is made, a strategy that lacks an op the layer calls (sequence
    parallel: ag_gemm and gemm_rs; otherwise gemm_ar), rather than at its first forward or backward."""
    if strategy == "default":
        return
    ops_of = {name: ops for name, _, _, ops in weft.strategies()}
    if strategy not in ops_of:
        raise ValueError(f"{who}: no strategy {strategy!r}; one of 'default', {', '.join(repr(s) for s in sorted(ops_of))}")
    needed = ("ag_gemm", "gemm_rs") if sequence_parallel else ("gemm_ar",)
    missing = [op for op in needed if op not in ops_of[strategy]]
    if missing:
        able = [name for name, ops in ops_of.items() if all(op in ops for op in needed)]
        kind = "a sequence-parallel layer" if sequence_parallel else "a layer without sequence parallelism"
        raise ValueError(f"{who}: strategy {strategy!r} does not implement {' or '.join(missing)}, which {kind} calls; "
                         f"give 'default' or one of {', '.join(repr(s) for s in sorted(able))}")


class ColumnParallelLinear(torch.nn.Module):
    """y = x @ W^T with W's rows (output features) split over ranks; see the module's docstring.
    save_gathered_input (sequence parallel): keep the input the forward's ag_gemm gathered until the
    backward, W times the memory of x, instead of gathering it a second time for dW. fp8: a
    Float8Recipe for the products (see the module), None for bf16."""

    def __init__(self, in_features, out_features, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16,
                 save_gathered_input=False, fp8=None):
        super().__init__()
        world = world_size()
        if out_features % world:
            raise ValueError(f"ColumnParallelLinear: out_features={out_features} is not a multiple of the world size {world}")
        _require_strategy(strategy, sequence_parallel, "ColumnParallelLinear")
        self.sequence_parallel, self.strategy, self.save_gathered_input = sequence_parallel, strategy, save_gathered_input
        self.fp8 = _fp8_recipe(fp8)
        self.weight = _init_weight(out_features // world, in_features, device or torch.cuda.current_device(), dtype)

    def forward(self, x):
        return _ColumnParallel.apply(x, self.weight, self.sequence_parallel, self.strategy, self.save_gathered_input, self.fp8)


class RowParallelLinear(torch.nn.Module):
    """z = y @ W^T with W's columns (input features) split over ranks; see the module's docstring
    (fp8: a Float8Recipe for the product, None for bf16)."""

    def __init__(self, in_features, out_features, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16, fp8=None):
        super().__init__()
        world = world_size()
        if in_features % world:
            raise ValueError(f"RowParallelLinear: in_features={in_features} is not a multiple of the world size {world}")
        _require_strategy(strategy, sequence_parallel, "RowParallelLinear")
        self.sequence_parallel, self.strategy = sequence_parallel, strategy
        self.fp8 = _fp8_recipe(fp8)
        self.weight = _init_weight(out_features, in_features // world, device or torch.cuda.current_device(), dtype)

    def forward(self, y):
        return _RowParallel.apply(y, self.weight, self.sequence_parallel, self.strategy, self.fp8)


class TensorParallelMLP(torch.nn.Module):
    """z = GELU(x @ W1^T) @ W2^T, Megatron-style: W1 split by rows, W2 by columns (save_gathered_input:
    ColumnParallelLinear's; fp8: both products by that recipe, see the module)."""

    def __init__(self, hidden, ffn, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16,
                 save_gathered_input=False, fp8=None):
        super().__init__()
        self.up = ColumnParallelLinear(hidden, ffn, sequence_parallel, strategy, device, dtype, save_gathered_input, fp8)
        self.down = RowParallelLinear(ffn, hidden, sequence_parallel, strategy, device, dtype, fp8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))
