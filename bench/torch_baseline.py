"""PyTorch's own GEMM-then-collective, timed the way `weft bench` times `sequential`, to check
that weft's baseline is honest. Start with:
  torchrun --standalone --nproc_per_node=W bench/torch_baseline.py --op gemm_rs --shape 8192x4096x11008
Shapes are given before tensor parallelism, split as bench/*.json rows are (see bench_suite.hpp).
Prints the median over iterations of the slowest rank, in milliseconds.
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--op", choices=["ag_gemm", "gemm_rs", "gemm_ar"], required=True)
    # One option for M x N x K: torchrun would take --m, --n, --k as abbreviations of its own options.
    parser.add_argument("--shape", required=True, help="MxNxK")
    parser.add_argument("--split", choices=["tensor", "none"], default="tensor")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.get_world_size()
    m, n, k = (int(x) for x in args.shape.split("x"))
    args.m, args.n, args.k = m, n, k
    if args.split == "tensor":
        if args.op == "ag_gemm":
            m, n = m // world, n // world
        else:
            k = k // world
    a = torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
    b = torch.rand(n, k, device="cuda", dtype=torch.bfloat16) * 2 - 1

    if args.op == "ag_gemm":
        gathered = torch.empty(world * m, k, device="cuda", dtype=torch.bfloat16)

        def step():
            dist.all_gather_into_tensor(gathered, a)
            return torch.mm(gathered, b.t())
    elif args.op == "gemm_rs":
        out = torch.empty(m // world, n, device="cuda", dtype=torch.bfloat16)

        def step():
            dist.reduce_scatter_tensor(out, torch.mm(a, b.t()))
            return out
    else:
        def step():
            c = torch.mm(a, b.t())
            dist.all_reduce(c)
            return c

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(args.warmup + args.iterations):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        step()
        stop.record()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(start.elapsed_time(stop))
    times.sort()
    median = torch.tensor([times[len(times) // 2]], device="cuda")
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"torch {args.op} m={args.m} n={args.n} k={args.k} world={world}: {median.item():.3f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
