"""The tensor-parallel layers of weft/torch/layers.py written with torch.mm and torch.distributed
(its autograd-aware collectives), the reference the tests and weft.benchmark compare weft with: the
sequential equivalent of each layer, forward and backward. They take their weights from a weft
layer, so both compute with the same numbers. Their backward is autograd's: mm's gradient multiplies
by the weight itself (no transposed copy), and a column-parallel product keeps the gathered input it
multiplied for dW (what weft's layers do with save_gathered_input; without it they gather again)."""

import torch
import torch.distributed as dist

from .comm import process_group, world_size


def _all_gather(x):
    if world_size() == 1:
        return x
    import torch.distributed.nn.functional as fn

    return torch.cat(fn.all_gather(x.contiguous(), group=process_group()), dim=0)


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
