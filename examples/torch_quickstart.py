"""weft from PyTorch, as the README's quick start shows it. Run it as it is:

    torchrun --standalone --nproc_per_node=1 examples/torch_quickstart.py     # one GPU
    torchrun --standalone --nproc_per_node=8 examples/torch_quickstart.py     # eight

Each rank holds a shard of the tokens (sequence parallel) and 1/W of the MLP's weights. The up
projection gathers the token shards and multiplies (AllGather + GEMM, one call); the down projection
multiplies and reduce-scatters the result back to token shards (GEMM + ReduceScatter, one call).
"""

import os

import torch
import torch.distributed as dist

import weft.torch

local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)  # before anything touches the GPU: each rank on its own GPU
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
weft.torch.init()  # weft's communicator, bootstrapped over the process group
world, rank = dist.get_world_size(), dist.get_rank()

hidden, ffn, tokens = 4096, 14336, 4096  # tokens over all ranks; ffn and tokens divisible by W
# weft's ops take row-major contiguous bfloat16 CUDA tensors; B is [n, k], a linear layer's weight.
x_shard = torch.randn(tokens // world, hidden, device="cuda", dtype=torch.bfloat16)
w_up = torch.randn(ffn // world, hidden, device="cuda", dtype=torch.bfloat16) * hidden**-0.5
w_down = torch.randn(hidden, ffn // world, device="cuda", dtype=torch.bfloat16) * (ffn // world) ** -0.5

h = torch.ops.weft.ag_gemm(x_shard, w_up)  # gather(x) @ w_up.T: [tokens, ffn / W]
y_shard = torch.ops.weft.gemm_rs(torch.nn.functional.gelu(h), w_down)  # reduce_scatter(... @ w_down.T): [tokens / W, hidden]

# The same layer with autograd: forward and backward through weft's ops.
mlp = weft.torch.TensorParallelMLP(hidden, ffn)  # sequence parallel by default; weights [ffn/W, hidden], [hidden, ffn/W]
x = x_shard.clone().requires_grad_()
mlp(x).float().square().mean().backward()

# A named strategy instead of the default ("auto"): weft.torch.ops takes names, torch.ops.weft ids.
y_fused = weft.torch.ops.gemm_rs(torch.nn.functional.gelu(h), w_down, strategy="fused")
torch.cuda.synchronize()
error = ((y_fused.float() - y_shard.float()).norm() / y_shard.float().norm()).item()
if rank == 0:
    print(f"weft quick start: {world} rank(s), h {tuple(h.shape)}, y {tuple(y_shard.shape)}, "
          f"x.grad {tuple(x.grad.shape)}, fused vs default {error:.1e}")
dist.destroy_process_group()
