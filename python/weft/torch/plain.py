"""The tensor-parallel layers of weft/torch/layers.py written with torch.mm and torch.distributed
(its autograd-aware collectives), the reference the tests and weft.benchmark compare weft with: the
sequential equivalent of each layer, forward and backward. They take their weights from a weft
layer, so both compute with the same numbers. Their backward is autograd's: mm's gradient multiplies
by the weight itself (no transposed copy), and a column-parallel product keeps the gathered input it
multiplied for dW (what weft's layers do with save_gathered_input; without it they gather again)."""

import torch
import torch.distributed as dist

from .comm import process_group, world_size


class _ContiguousGradient(torch.autograd.Function):
    """Identity forward; backward hands on the gradient made contiguous. torch.distributed.nn's
    all_gather sends each rank's chunk of the gradient as it lies, and a strided one (the gradient of
    a permuted view, as attention's is) arrives wrong over gloo, where a contiguous one is exact."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, dx):
        return dx.contiguous()


def _all_gather(x):
    if world_size() == 1:
        return x
    import torch.distributed.nn.functional as fn

    return _ContiguousGradient.apply(torch.cat(fn.all_gather(x.contiguous(), group=process_group()), dim=0))


def _reduce_scatter(x):
    if world_size() == 1:
        return x
    import torch.distributed.nn.functional as fn

    chunks = list(x.contiguous().chunk(world_size(), dim=0))
    out = torch.empty_like(chunks[0])
    return fn.reduce_scatter(out, chunks, group=process_group())


class _ReduceFromTensorParallel(torch.autograd.Function):
    """All-reduce forward, identity backward: a row-parallel layer's output, replicated after the sum
    (torch.distributed.nn.functional.all_reduce would all-reduce the gradient too, counting a
    replicated gradient W times)."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=process_group())
        return x

    @staticmethod
    def backward(ctx, dx):
        return dx


def _all_reduce(x):
    if world_size() == 1:
        return x
    return _ReduceFromTensorParallel.apply(x)


class _CopyToTensorParallel(torch.autograd.Function):
    """Identity forward, all-reduce backward: a replicated input feeding a column-parallel layer."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, dx):
        if world_size() == 1:
            return dx
        dx = dx.contiguous().clone()
        dist.all_reduce(dx, group=process_group())
        return dx


def column_parallel(x, weight, sequence_parallel):
    if sequence_parallel:
        return torch.mm(_all_gather(x), weight.t())
    return torch.mm(_CopyToTensorParallel.apply(x), weight.t())


def row_parallel(y, weight, sequence_parallel):
    partial = torch.mm(y, weight.t())
    return _reduce_scatter(partial) if sequence_parallel else _all_reduce(partial)


def mlp(x, up_weight, down_weight, sequence_parallel):
    return row_parallel(torch.nn.functional.gelu(column_parallel(x, up_weight, sequence_parallel)), down_weight, sequence_parallel)


# PyTorch AsyncTP's fused products (symmetric memory; torch.ops.symm_mem), the sequence-parallel
# layers' forward only: these ops have no autograd formula, so they serve a prefill step (the model
# step benchmark's AsyncTP variant), not training.
def _symm_mem_group_name():
    from torch.distributed import _symmetric_memory as symm_mem

    group = process_group() or dist.group.WORLD
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        import warnings

        with warnings.catch_warnings():  # deprecated (and a no-op) in newer torch
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group.group_name)
    return group.group_name


def column_parallel_async_tp(x, weight):
    """gather(x) @ weight^T through torch.ops.symm_mem.fused_all_gather_matmul (sequence parallel)."""
    group_name = _symm_mem_group_name()  # first: importing _symmetric_memory registers torch.ops.symm_mem
    return torch.ops.symm_mem.fused_all_gather_matmul(x.contiguous(), [weight.t()], gather_dim=0, group_name=group_name)[1][0]


def row_parallel_async_tp(y, weight):
    """reduce_scatter(y @ weight^T) through torch.ops.symm_mem.fused_matmul_reduce_scatter (sequence parallel)."""
    group_name = _symm_mem_group_name()  # first: importing _symmetric_memory registers torch.ops.symm_mem
    return torch.ops.symm_mem.fused_matmul_reduce_scatter(y.contiguous(), weight.t(), "sum", scatter_dim=0, group_name=group_name)


def column_parallel_async_tp_fp8(qx, qw):
    """gather(x) @ weight^T in FP8 through torch.ops.symm_mem.fused_all_gather_scaled_matmul: qx, qw
    Float8 (fp8.py); bf16 out. Forward only, sequence parallel."""
    group_name = _symm_mem_group_name()
    return torch.ops.symm_mem.fused_all_gather_scaled_matmul(
        qx.data, [qw.data.t()], qx.scale, [qw.column_scale()], 0, group_name, [None], [None], [torch.bfloat16], [False])[1][0]


def row_parallel_async_tp_fp8(qy, qw):
    """reduce_scatter(y @ weight^T) in FP8 through torch.ops.symm_mem.fused_scaled_matmul_reduce_scatter."""
    group_name = _symm_mem_group_name()
    rows = qy.data.shape[0]
    return torch.ops.symm_mem.fused_scaled_matmul_reduce_scatter(
        qy.data, qw.data.t(), qy.scale, qw.column_scale(), "sum", 0, 0, group_name, [rows, qw.data.shape[0]], out_dtype=torch.bfloat16)


# The FP8 recipe (weft/torch/fp8.py) in plain torch: the product torch._scaled_mm gives (on the CPU,
# where torch._scaled_mm takes only tensor-wise scales, the dequantized product in float64), and
# autograd's gradient of the dequantized operands' product with quantization passed straight through
# (an fp32 GEMM of the bf16 dequantized operands). The quantization itself is fp8.py's (tested on
# its own against a float64 definition); the rest is written here independently of layers.py.
def _fp8_product(a, b):
    e4m3 = a.data.dtype == torch.float8_e4m3fn and b.data.dtype == torch.float8_e4m3fn
    if a.data.is_cuda or (a.scale.dim() == 0 and b.scale.dim() == 0 and e4m3):
        return torch._scaled_mm(a.data, b.data.t(), scale_a=a.scale, scale_b=b.column_scale(), out_dtype=torch.bfloat16)
    return torch.mm(a.data.double() * a.scale.double(), (b.data.double() * b.scale.double()).t()).to(torch.bfloat16)


class _Fp8Linear(torch.autograd.Function):
    """x @ weight.T with an FP8 backward (recipe.backward "fp8"): the forward the FP8 product; the
    input gradient the FP8 product of dy in e5m2 and weight^T in e4m3 (fp8.input_gradient_operands);
    the weight gradient dy^T x (x as the forward dequantized it) in fp32, rounded once."""

    @staticmethod
    def forward(ctx, x, weight, recipe):
        from .fp8 import quantize

        qx, qw = quantize(x, recipe), quantize(weight, recipe)
        ctx.save_for_backward(qx.dequantize(torch.float32), weight)
        ctx.recipe = recipe
        return _fp8_product(qx, qw).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        from .fp8 import input_gradient_operands

        x, weight = ctx.saved_tensors
        qdy, qwt = input_gradient_operands(dy, weight, ctx.recipe)
        return _fp8_product(qdy, qwt).to(dy.dtype), torch.mm(dy.float().t(), x).to(weight.dtype), None


def fp8_linear(x, weight, recipe):
    """x @ weight.T by the recipe: forward the FP8 product (bf16); backward straight through (bf16
    recipe) or with the input gradient in FP8 (recipe.backward "fp8": _Fp8Linear)."""
    from .fp8 import quantize

    if recipe.backward == "fp8":
        return _Fp8Linear.apply(x, weight, recipe)

    qx, qw = quantize(x, recipe), quantize(weight, recipe)
    passed_x = x + (qx.dequantize(x.dtype) - x).detach()  # value: the dequantized x; gradient: identity
    passed_w = weight + (qw.dequantize(weight.dtype) - weight).detach()
    high = torch.mm(passed_x.float(), passed_w.float().t())
    # value: the FP8 product (exactly: the fp32 difference added back rounds to the same bf16);
    # gradient: the fp32 product's
    return (high + (_fp8_product(qx, qw).float() - high).detach()).to(x.dtype)


def fp8_column_parallel(x, weight, sequence_parallel, recipe):
    if sequence_parallel:
        return fp8_linear(_all_gather(x), weight, recipe)  # tensor-wise: one scale over the gathered x
    return fp8_linear(_CopyToTensorParallel.apply(x), weight, recipe)


def fp8_row_parallel(y, weight, sequence_parallel, recipe):
    partial = fp8_linear(y, weight, recipe)
    return _reduce_scatter(partial) if sequence_parallel else _all_reduce(partial)


def fp8_mlp(x, up_weight, down_weight, sequence_parallel, recipe):
    hidden = torch.nn.functional.gelu(fp8_column_parallel(x, up_weight, sequence_parallel, recipe))
    return fp8_row_parallel(hidden, down_weight, sequence_parallel, recipe)


def attention_over_gathered(q, k_all, v_all, causal, rank):
    """softmax(q K^T / sqrt(d)) V of this rank's queries q [t, (batch,) heads, d] over every rank's keys
    and values k_all, v_all [W t, (batch,) kv_heads, d] (GQA: query head h reads kv head h / (heads /
    kv_heads)), causal by global position (query i is token rank * t + i), through the installed
    torch's scaled_dot_product_attention: weft's ag_attention's definition, and its backward."""
    squeeze = q.dim() == 3
    if squeeze:
        q, k_all, v_all = q.unsqueeze(1), k_all.unsqueeze(1), v_all.unsqueeze(1)
    tokens = q.shape[0]
    mask = None
    if causal:
        # The keys after this rank's last query are never attended: cut, the rest is causal aligned
        # to the lower right (query i sees keys up to rank * tokens + i), which SDPA's fused
        # backends take without a materialised mask.
        from torch.nn.attention.bias import causal_lower_right

        k_all, v_all = k_all[: (rank + 1) * tokens], v_all[: (rank + 1) * tokens]
        mask = causal_lower_right(tokens, k_all.shape[0])
    # [t, b, h, d] -> SDPA's [b, h, t, d]
    qq, kk, vv = (x.permute(1, 2, 0, 3) for x in (q, k_all, v_all))
    o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=qq.shape[1] != kk.shape[1])
    o = o.permute(2, 0, 1, 3).contiguous()
    return o.squeeze(1) if squeeze else o


def sequence_parallel_attention(q, k, v, causal=False):
    """weft.torch.attention.SequenceParallelAttention written with torch.distributed: all_gather of k
    and v (autograd's: their gradients reduce-scattered back), then SDPA (attention_over_gathered)."""
    rank = torch.distributed.get_rank(process_group()) if world_size() > 1 else 0
    return attention_over_gathered(q, _all_gather(k), _all_gather(v), causal, rank)


def moe_row_order(choices, topk):
    """The MoE row layout of ag_moe's result (ir/problem.hpp's moe_rows): row r holds (token, choice)
    flat index order[r] = token * topk + choice, tokens numbered over every rank (rank s's token i is
    s * rows + i), grouped by source rank, then expert, then token, then choice. choices: every rank's
    experts per token, [W, rows * topk]."""
    per_rank = choices.shape[1]
    return torch.cat([s * per_rank + torch.argsort(choices[s].long(), stable=True) for s in range(choices.shape[0])])


def ag_moe(a, b, choices, experts):
    """torch.ops.weft.ag_moe's sequential equivalent: all_gather of the tokens, then each (token,
    choice) row times its expert's shard of b [experts * n, k], in the MoE row layout."""
    topk = choices.shape[1] // a.shape[0]
    gathered = _all_gather(a)
    order = moe_row_order(choices, topk).to(a.device)
    expert_of = choices.reshape(-1).long().to(a.device)[order]
    tokens = order // topk
    n = b.shape[0] // experts
    out = a.new_empty((order.numel(), n))
    for e in range(experts):
        rows = (expert_of == e).nonzero().squeeze(1)
        if rows.numel():
            out[rows] = torch.mm(gathered[tokens[rows]], b[e * n:(e + 1) * n].t())
    return out


def moe_rs(a, b, choices, topk_weights, experts):
    """torch.ops.weft.moe_rs's sequential equivalent: each row of a (MoE row layout) times its
    expert's b, the top-k weighted sum per token, and reduce_scatter of every rank's tokens."""
    topk = topk_weights.shape[1]
    order = moe_row_order(choices, topk).to(a.device)
    expert_of = choices.reshape(-1).long().to(a.device)[order]
    n = b.shape[0] // experts
    partial = a.new_empty((a.shape[0], n))
    for e in range(experts):
        rows = (expert_of == e).nonzero().squeeze(1)
        if rows.numel():
            partial[rows] = torch.mm(a[rows], b[e * n:(e + 1) * n].t())
    row_of = torch.empty_like(order)
    row_of[order] = torch.arange(order.numel(), device=a.device)  # (token, choice) -> its row
    wide = torch.promote_types(a.dtype, torch.float32)  # the top-k sum in at least float32
    combined = (partial[row_of].to(wide).view(-1, topk, n) * topk_weights.to(wide).unsqueeze(2)).sum(1).to(a.dtype)
    return _reduce_scatter(combined)


def expert_counts(expert_of, experts):
    """Rows per expert, on the device without a host synchronisation (torch.bincount on CUDA reads
    its input's maximum back to the host)."""
    return torch.zeros(experts, dtype=torch.long, device=expert_of.device).scatter_add_(0, expert_of, torch.ones_like(expert_of))


class ByExpert:
    """The rows of the MoE layout sorted by expert, each expert's group padded to 16 rows (Hopper's
    grouped kernel aligns groups so), for torch._grouped_mm: `place(x)` puts rows there (zeros in the
    padding), `take(y)` reads them back in the layout's order."""

    def __init__(self, expert_of, experts):
        self.experts = experts
        self.order = torch.argsort(expert_of, stable=True)
        self.counts = expert_counts(expert_of, experts)
        padded = (self.counts + 15) // 16 * 16
        self.ends = torch.cumsum(padded, 0).to(torch.int32)
        e_sorted = expert_of[self.order]
        within = torch.arange(self.order.numel(), device=expert_of.device) - (torch.cumsum(self.counts, 0) - self.counts)[e_sorted]
        self.at = (self.ends.long() - padded)[e_sorted] + within
        self.rows = self.order.numel() + 16 * experts

    def place(self, x):
        out = x.new_zeros((self.rows, x.shape[1]))
        out[self.at] = x[self.order]
        return out

    def take(self, y):
        out = y.new_empty((self.order.numel(), y.shape[1]))
        out[self.order] = y[self.at]
        return out

    def products(self, x, w):
        """Row r of the layout times its expert's [n, k] slab of w ([experts * n, k]): x[r] @ w_e^T."""
        n = w.shape[0] // self.experts
        return self.take(torch._grouped_mm(self.place(x), w.view(self.experts, n, -1).transpose(1, 2), offs=self.ends))

    def products_t(self, x, w):
        """x[r] @ w_e (w_e [n, k] the expert's slab): the input gradient's product."""
        n = w.shape[0] // self.experts
        return self.take(torch._grouped_mm(self.place(x), w.view(self.experts, n, -1), offs=self.ends))

    def weight_gradients(self, dy, x):
        """Per expert, sum over its rows r of dy[r]^T x[r]: [experts * n, k] with n = dy's columns;
        an expert nobody picked gets zeros (not whatever a group of no rows leaves)."""
        g = torch._grouped_mm(self.place(dy).t(), self.place(x), offs=self.ends)
        g = torch.where((self.counts > 0).view(-1, 1, 1), g, torch.zeros((), dtype=g.dtype, device=g.device))
        return g.reshape(-1, x.shape[1])


def _rows_by_expert(x, expert_of, b, experts):
    """y[r] = x[r] @ (expert expert_of[r]'s rows of b)^T through one torch._grouped_mm (torch >= 2.8)."""
    return ByExpert(expert_of, experts).products(x, b)


def has_grouped_mm():
    return hasattr(torch, "_grouped_mm")


def ag_moe_grouped(a, b, choices, experts):
    """plain.ag_moe as a tuned torch MoE runs it: all_gather, then one grouped GEMM over every expert
    (torch._grouped_mm) instead of a torch.mm per expert; the same result."""
    topk = choices.shape[1] // a.shape[0]
    gathered = _all_gather(a)
    order = moe_row_order(choices, topk).to(a.device)
    expert_of = choices.reshape(-1).long().to(a.device)[order]
    return _rows_by_expert(gathered[order // topk], expert_of, b, experts)


def moe_rs_grouped(a, b, choices, topk_weights, experts):
    """plain.moe_rs with one grouped GEMM over every expert (torch._grouped_mm); the same result."""
    topk = topk_weights.shape[1]
    order = moe_row_order(choices, topk).to(a.device)
    expert_of = choices.reshape(-1).long().to(a.device)[order]
    n = b.shape[0] // experts
    partial = _rows_by_expert(a, expert_of, b, experts)
    row_of = torch.empty_like(order)
    row_of[order] = torch.arange(order.numel(), device=a.device)
    wide = torch.promote_types(a.dtype, torch.float32)
    combined = (partial[row_of].to(wide).view(-1, topk, n) * topk_weights.to(wide).unsqueeze(2)).sum(1).to(a.dtype)
    return _reduce_scatter(combined)
