"""weft for PyTorch: ``init`` a communicator from a process group, ``torch.ops.weft.*`` custom ops
(torch.compile and CUDA-graph safe) and tensor-parallel layers with autograd.

    import torch, weft.torch
    weft.torch.init()                                   # under torchrun, after init_process_group
    y = torch.ops.weft.ag_gemm(x_shard, w_up)           # gather(x) @ w_up.T, on the current stream
    mlp = weft.torch.TensorParallelMLP(4096, 14336)     # forward and backward through weft
    mlp8 = weft.torch.TensorParallelMLP(4096, 14336, fp8=weft.torch.Float8Recipe("rowwise"))   # FP8 products
    block = weft.torch.DecoderBlock(weft.models.config("llama3-8b"))   # a Llama-style layer (weft/torch/blocks.py)
    import weft.torch.compile; weft.torch.compile.enable()              # rewrite an unmodified TP model under torch.compile
    attn = weft.torch.SequenceParallelAttention(causal=True)            # o = attn(q, k, v): every rank's keys (weft/torch/attention.py)
"""

try:
    import torch as _torch  # noqa: F401
except ModuleNotFoundError as e:
    raise ModuleNotFoundError("weft.torch needs PyTorch (>= 2.7.1, built with CUDA): pip install 'weft[torch]', "
                              "or install torch for your CUDA first; weft itself (import weft) works without it") from e

from .attention import SequenceParallelAttention
from .comm import communicator, init, is_initialized, process_group, world_size
from .blocks import DecoderBlock, DecoderStack, RMSNorm, TensorParallelAttention, TensorParallelSwiGLU
from .fp8 import Float8Recipe
from .layers import ColumnParallelLinear, RowParallelLinear, TensorParallelMLP
from .moe import TensorParallelMoE
from .ops import check_errors, strategy_id, symmetric_input, synchronize

__all__ = [
    "ColumnParallelLinear",
    "DecoderBlock",
    "DecoderStack",
    "Float8Recipe",
    "RMSNorm",
    "RowParallelLinear",
    "SequenceParallelAttention",
    "TensorParallelAttention",
    "TensorParallelMLP",
    "TensorParallelMoE",
    "TensorParallelSwiGLU",
    "check_errors",
    "communicator",
    "init",
    "is_initialized",
    "process_group",
    "strategy_id",
    "symmetric_input",
    "synchronize",
    "world_size",
]
