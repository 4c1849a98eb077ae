"""weft.torch.TensorParallelMoE at world 2 on the CPU (run by test_moe_ops.py; python
moe_world_of_two.py runs it alone): two processes over torch.distributed's gloo, weft's communicator
a stand-in of two ranks on that group, and torch.ops.weft.ag_moe / moe_rs CPU kernels written here by
their definitions (ir/problem.hpp), apart from weft's code: every rank's tokens gathered, each (token,
choice) row in the MoE row layout (by source rank, expert, token, choice) times its expert's shard;
the weighted top-k sum per token over every rank's partial sums. Each rank checks the layer's output
and the gradients of its input, router, w1 and w2 (weft's backward: moe.py) against the same layer
through plain torch under autograd (plain.ag_moe / plain.moe_rs); exit status 0 where every check
on every rank passed."""

import sys

import torch
import torch.distributed as dist

import gloo_world  # this folder's (python/tests)
from gloo_world import WORLD
TOLERANCE = 2e-2  # bf16 products summed in other orders


def gathered(x):
    parts = [torch.empty_like(x) for _ in range(WORLD)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def layout(choices, experts, topk):
    """[(token over every rank, choice, expert)] in the MoE row layout, written out."""
    rows = []
    per_rank = choices.shape[1] // topk
    for s in range(choices.shape[0]):
        for e in range(experts):
            for i in range(per_rank):
                for j in range(topk):
                    if int(choices[s, i * topk + j]) == e:
                        rows.append((s * per_rank + i, j, e))
    return rows


def as_table(choices, rows):
    """Every rank's choices [W, rows * topk]: the ops take this rank's ids [rows, topk] (routing="ids";
    on the GPU, where the real ops run) or the table itself (routing="table")."""
    if choices.shape[0] == rows and rows != WORLD:
        return gathered(choices).reshape(WORLD, -1)
    return choices


def ag_moe_definition(a, b, choices, experts):
    choices = as_table(choices, a.shape[0])
    topk = choices.shape[1] // a.shape[0]
    tokens, n = gathered(a).double(), b.shape[0] // experts
    return torch.stack([tokens[t] @ b[e * n:(e + 1) * n].double().t() for t, _, e in layout(choices, experts, topk)]).to(a.dtype)


def moe_rs_definition(a, b, choices, weights, experts, rank):
    choices = as_table(choices, weights.shape[0] // WORLD)
    topk, n = weights.shape[1], b.shape[0] // experts
    z = torch.zeros(weights.shape[0], n, dtype=torch.float64)
    for r, (t, j, e) in enumerate(layout(choices, experts, topk)):
        z[t] += float(weights[t, j]) * (a[r].double() @ b[e * n:(e + 1) * n].double().t())
    dist.all_reduce(z)
    per_rank = weights.shape[0] // WORLD
    return z[rank * per_rank:(rank + 1) * per_rank].to(a.dtype)


def rel(got, want):
    got, want = got.double(), want.double()
    if torch.isnan(got).any() or want.abs().max() == 0:
        return float("inf")
    return ((got - want).norm() / want.norm()).item()


HIDDEN, FFN = 128, 256  # shapes the ops take the router's ids for (grouped GEMM: N of 128, 256)


def check(rank, wt, experts, topk, strategy, routing, path):
    torch.manual_seed(5 + rank)
    layer = wt.TensorParallelMoE(HIDDEN, FFN, experts, topk, strategy, device="cpu", grouped_backward=path == "grouped", routing=routing)
    want_routing = routing or ("ids" if strategy == "default" else "table")
    if layer.routing != want_routing:
        sys.stdout.write(f"rank {rank} {strategy}: the layer routes by {layer.routing}, not {want_routing}  FAILED\n")
        return False
    g = torch.Generator().manual_seed(17 + 100 * rank)
    x, dz = (torch.randn(12, HIDDEN, generator=g).to(torch.bfloat16) for _ in range(2))
    grads = []
    for plain_products in (False, True):
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        z = layer(xi, plain_products=plain_products)
        z.backward(dz)
        grads.append([z.detach(), xi.grad] + [p.grad.clone() for p in (layer.gate, layer.w1, layer.w2)])
    errors = {name: rel(ours, theirs) for name, ours, theirs in zip(("z", "dx", "dgate", "dw1", "dw2"), *grads)}
    ok = max(errors.values()) < TOLERANCE
    line = f"rank {rank} experts {experts} topk {topk} {strategy} {layer.routing} ({path}): " + ", ".join(f"{n} {e:.2e}" for n, e in errors.items()) + ("" if ok else "  FAILED")
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return ok


def run(rank, wt):
    lib = torch.library.Library("weft", "IMPL")
    lib.impl("ag_moe", lambda a, b, choices, experts, strategy=0: ag_moe_definition(a, b, choices, experts), "CPU")
    lib.impl("moe_rs", lambda a, b, choices, weights, experts, strategy=0: moe_rs_definition(a, b, choices, weights, experts, rank), "CPU")
    from weft.torch import moe

    ok = True
    # The backward through torch._grouped_mm (grouped_backward=True, where this torch has it; it must
    # not fail here), then the loop over experts (the default).
    for path in ("grouped", "loop") if torch_has_grouped_mm() else ("loop",):
        for experts, topk in ((4, 2), (3, 1)):
            for strategy, routing in (("default", None), ("default", "table"), ("tilelink", None)):
                ok &= check(rank, wt, experts, topk, strategy, routing, path)
        if path == "grouped" and moe._grouped_failed:
            sys.stdout.write(f"rank {rank}: torch._grouped_mm failed: {moe._grouped_failed[0]}  FAILED\n")
            ok = False
    # The layer's pick: the router's ids where both products' shapes take them, else the host table;
    # ids asked for where they are not taken is refused with the reason.
    small = wt.TensorParallelMoE(32, 64, 4, 2, "default", device="cpu")
    if small.routing != "table":
        sys.stdout.write(f"rank {rank}: hidden 32 (N of moe_rs) routes by {small.routing}, not the table  FAILED\n")
        ok = False
    try:
        wt.TensorParallelMoE(32, 64, 4, 2, "default", device="cpu", routing="ids")
        sys.stdout.write(f"rank {rank}: routing='ids' at hidden 32 was not refused  FAILED\n")
        ok = False
    except ValueError as e:
        if "grouped GEMM only" not in str(e):
            sys.stdout.write(f"rank {rank}: routing='ids' at hidden 32 refused for another reason: {e}  FAILED\n")
            ok = False
    moe._grouped_failed.clear()
    lib._destroy()
    return ok


def torch_has_grouped_mm():
    return hasattr(torch, "_grouped_mm")


if __name__ == "__main__":
    sys.exit(gloo_world.main(run))
