"""FP8 training recipes for weft's tensor-parallel layers (layers.py: fp8=Float8Recipe(...)), with
scales computed on the fly as torchao's float8 training computes them ("dynamic" scaling):

    amax  = max |x|                  over the whole tensor (tensorwise) or each row (rowwise), fp32
    scale = max(amax, AMAX_FLOOR) / 448             the dequantization scale (real = value * scale)
    q     = e4m3(clamp(x / scale, -448, 448))       saturating: never inf or NaN

A layer quantizes its input and its weight shard each forward (a [rows, k] input per row, a [n, k]
weight per row, i.e. per output column) and hands the FP8 operands and their scales to weft's op,
which multiplies them as torch._scaled_mm does, giving bf16.

Where weft's op cannot run that FP8 product at this world size with this strategy (it declines:
plan/gpu_lowering.hpp; e.g. tilelink's ag_gemm, whose companion moves bf16 rows only),
the layer still
computes the same FP8 product, with torch's pieces: the FP8 operand's bytes (and row scales)
gathered by torch.distributed, torch._scaled_mm, and torch.distributed's reduce-scatter or
all-reduce of its bf16 partial sums; a warning says so once per op and strategy, with weft's reason.
The recipe decides the numbers, the strategy only how the communication runs.
"""

import re
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .comm import all_gather_rows, process_group, world_size

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
E5M2 = torch.float8_e5m2
E5M2_MAX = 57344.0  # torch.finfo(torch.float8_e5m2).max: gradients' range
_MAX = {E4M3: E4M3_MAX, E5M2: E5M2_MAX}
AMAX_FLOOR = 1e-12  # torchao's: a zero tensor gets a tiny positive scale, not a division by zero

SCALINGS = ("tensorwise", "rowwise")
BACKWARDS = ("bf16", "fp8")


@dataclass(frozen=True)
class Float8Recipe:
    """How a layer's products run in FP8 (e4m3 operands, bf16 output):
    scaling "tensorwise": one scale per operand; "rowwise": one per row of the input and one per
    row of the weight (per output column), as torch._scaled_mm's row-wise mode takes them.
    backward "bf16": the backward's products in bf16 on the dequantized FP8 operands; "fp8": the
    input gradients' products (those weft communicates) in FP8 too, the output gradient in e5m2
    (its range) times the weight's transpose in e4m3, each quantized by `scaling`; the weight
    gradient stays in bf16 (torchao's "rowwise with high-precision weight gradient")."""

    scaling: str = "tensorwise"
    backward: str = "bf16"

    def __post_init__(self):
        if self.scaling not in SCALINGS:
            raise ValueError(f"Float8Recipe: scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.backward not in BACKWARDS:
            raise ValueError(f"Float8Recipe: backward must be one of {BACKWARDS}, got {self.backward!r}")

    @property
    def rowwise(self):
        return self.scaling == "rowwise"


class Float8(NamedTuple):
    """An e4m3 tensor and its fp32 dequantization scale (0-d, or [rows, 1] one per row)."""

    data: torch.Tensor
    scale: torch.Tensor

    def dequantize(self, dtype=torch.bfloat16):
        return (self.data.float() * self.scale).to(dtype)

    def column_scale(self):
        """The scale as torch._scaled_mm's scale_b takes a [n, k] weight's: [1, n] where row-wise."""
        return self.scale.reshape(1, -1) if self.scale.dim() else self.scale


def amax(x, rowwise, across_ranks=False):
    """max |x| in fp32: [rows, 1] per row, else 0-d; across_ranks (tensor-wise): the largest over
    weft's ranks (the one scale a tensor gathered from every rank's rows must share; rows keep their
    own scales where row-wise)."""
    x = x.detach()
    if rowwise:
        return x.abs().amax(dim=-1, keepdim=True).float()
    found = x.abs().amax().float()
    if across_ranks and world_size() > 1:
        found = found.reshape(1)  # a 1-element tensor for the collective, 0-d again after
        torch.distributed.all_reduce(found, op=torch.distributed.ReduceOp.MAX, group=process_group())
        found = found.reshape(())
    return found


def scale_of(found_amax, dtype=E4M3):
    """The dequantization scale of an amax: max(amax, AMAX_FLOOR) / the dtype's largest (448 for
    e4m3, 57344 for e5m2), fp32."""
    return (found_amax.float().clamp(min=AMAX_FLOOR) / _MAX[dtype]).contiguous()


def quantize_with(x, scale, dtype=E4M3):
    """x / scale in fp32, saturated to the dtype's range, rounded to it (to nearest, ties to even)."""
    limit = _MAX[dtype]
    return Float8((x.detach().float() / scale).clamp(-limit, limit).to(dtype).contiguous(), scale)


def quantize(x, recipe, across_ranks=False, dtype=E4M3):
    """x [rows, k] quantized by the recipe: Float8 with one scale, or one per row (dtype: e4m3, or
    e5m2 for a gradient)."""
    return quantize_with(x, scale_of(amax(x, recipe.rowwise, across_ranks), dtype), dtype)


def input_gradient_operands(dy, weight, recipe, across_ranks=False):
    """The FP8 backward's operands of dy @ weight (recipe.backward "fp8"): dy [rows, n] in e5m2 and
    weight^T [k, n] (a transposed copy, made contiguous) in e4m3, each quantized by the recipe's
    scaling; across_ranks: dy's tensor-wise scale over every rank's (a gathered A's)."""
    return quantize(dy, recipe, across_ranks, E5M2), quantize(weight.t().contiguous(), recipe)


def scaled_mm(a, b, out_dtype=torch.bfloat16):
    """a.data @ b.data.T with both scales (a: Float8 [m, k], b: Float8 [n, k]) on this device:
    torch._scaled_mm on a GPU; on the CPU (tests) the dequantized product in fp32, rounded once."""
    if a.data.is_cuda:
        return torch._scaled_mm(a.data, b.data.t(), scale_a=a.scale, scale_b=b.column_scale(), out_dtype=out_dtype)
    return torch.mm(a.data.float() * a.scale, (b.data.float() * b.scale).t()).to(out_dtype)


def all_gather_float8(x):
    """Every rank's Float8 rows stacked by rank: the FP8 bytes (half bf16's), and the row scales with
    their rows (a tensor-wise scale is already the same on every rank: amax across_ranks)."""
    data = all_gather_rows(x.data.view(torch.uint8)).view(x.data.dtype)
    scale = all_gather_rows(x.scale) if x.scale.dim() else x.scale
    return Float8(data, scale)


# Why weft's op declined an FP8 product, by (op, strategy, rows, n, k, scaling): asked once.
_declined = {}
_DECLINE = re.compile(r"declines .* here on the GPU|no strategy runs")


def _torch_equivalent(op, a, b):
    """The FP8 product of weft's `op`, sequentially with torch's pieces (see the module); for
    ag_gemm also the gathered Float8 A."""
    if op == "ag_gemm":
        gathered = all_gather_float8(a)
        return scaled_mm(gathered, b), gathered
    partial = scaled_mm(a, b)
    world = world_size()
    if world > 1:
        if op == "gemm_ar":
            torch.distributed.all_reduce(partial, group=process_group())
        else:
            out = partial.new_empty((partial.shape[0] // world, partial.shape[1]))
            torch.distributed.reduce_scatter_tensor(out, partial, group=process_group())
            partial = out
    return partial, None


def product(op, a, b, strategy):
    """weft's `op` (ag_gemm, gemm_rs, gemm_ar) of Float8 a [rows, k] and Float8 weight b [n, k], bf16.
    Returns (the result, the gathered Float8 A where ag_gemm's product gathered it here, else None)."""
    from . import ops  # the native ops: imported when first used (this module's recipe needs none)

    key = (op, strategy, a.data.shape[0], b.data.shape[0], b.data.shape[1], a.scale.dim() > 0, a.data.dtype)
    if key not in _declined:
        try:
            return getattr(ops, op)(a.data, b.data, strategy, scale_a=a.scale, scale_b=b.column_scale(),
                                    out_dtype=torch.bfloat16), None
        except ValueError as e:
            if not _DECLINE.search(str(e)):
                raise
            _declined[key] = str(e)
            warnings.warn(f"weft.torch: {op} with strategy {strategy!r} does not run this FP8 product at world {world_size()} "
                          f"({e}); the layer computes the same FP8 product with torch.distributed and torch._scaled_mm instead",
                          stacklevel=3)
    return _torch_equivalent(op, a, b)
