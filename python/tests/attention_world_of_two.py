"""weft.torch.SequenceParallelAttention at world 2 on the CPU (run by test_attention_layer.py; python
attention_world_of_two.py runs it alone): two processes over torch.distributed's gloo, weft's
communicator a stand-in of two ranks on that group, and torch.ops.weft.ag_attention a CPU kernel by
its definition, written here apart from weft's code: every rank's keys and values gathered, then
softmax(q K^T / sqrt(d)) V in float64 with GQA's head sharing and the causal mask by global position
spelled out. Each rank checks the layer's output and the gradients of q, k and v (the layer's
backward: its own gather, SDPA's gradient, the reduce-scatter of the keys' and values' gradients)
against the same attention in plain torch (weft/torch/plain.py: autograd through torch.distributed),
and that output against the definition; exit status 0 where every check on every rank passed."""

import math
import sys

import torch
import torch.distributed as dist

import gloo_world  # this folder's (python/tests)
from gloo_world import WORLD
TOLERANCE = 2e-2  # bf16 results and gradients (8 bits of mantissa), summed in other orders


def gathered(x, world):
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def attend(q, k_all, v_all, causal, rank):
    """softmax(q K^T / sqrt(d)) V of q [t, (b,) h, d] over k_all, v_all [W t, (b,) g, d], in their dtype."""
    squeeze = q.dim() == 3
    q, k, v = (x if x.dim() == 4 else x.unsqueeze(1) for x in (q, k_all, v_all))
    tokens, total, heads, kv_heads, d = q.shape[0], k.shape[0], q.shape[2], k.shape[2], q.shape[3]
    k, v = k.repeat_interleave(heads // kv_heads, dim=2), v.repeat_interleave(heads // kv_heads, dim=2)
    scores = torch.einsum("tbhd,sbhd->bhts", q, k) / math.sqrt(d)
    if causal:
        allowed = torch.arange(total)[None, :] <= (rank * tokens + torch.arange(tokens))[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
    o = torch.einsum("bhts,sbhd->tbhd", torch.softmax(scores, dim=-1), v)
    return o.squeeze(1) if squeeze else o


def definition(q, k, v, causal, rank, world):
    """ag_attention of this rank's q over every rank's k, v (gathered here), in float64, as bf16."""
    return attend(q.double(), gathered(k, world).double(), gathered(v, world).double(), causal, rank).to(torch.bfloat16)


def definition_gradients(q, k, v, do, causal, rank, world):
    """The gradients of q, k and v by the definition: autograd in float64 over the gathered keys and
    values, whose gradients summed over the ranks give each rank those of its own rows."""
    q64 = q.double().requires_grad_()
    k64, v64 = (gathered(x, world).double().requires_grad_() for x in (k, v))
    attend(q64, k64, v64, causal, rank).backward(do.double())
    own = slice(rank * q.shape[0], (rank + 1) * q.shape[0])
    for g in (k64.grad, v64.grad):
        dist.all_reduce(g)
    return q64.grad, k64.grad[own], v64.grad[own]


def rel(got, want):
    got, want = got.double(), want.double()
    if torch.isnan(got).any() or want.abs().max() == 0:
        return float("inf")
    return ((got - want).norm() / want.norm()).item()


def check(rank, wt, plain, shape, causal, strategy):
    tokens, batch, heads, kv_heads, d = shape
    lead = (tokens, batch) if batch else (tokens,)
    g = torch.Generator().manual_seed(11 + 100 * rank)
    q, k, v, do = (torch.randn(lead + (h, d), generator=g).to(torch.bfloat16) for h in (heads, kv_heads, kv_heads, heads))
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    o = wt.SequenceParallelAttention(causal, strategy)(*ours)
    o.backward(do)
    theirs = [x.clone().requires_grad_() for x in (q, k, v)]
    o_plain = plain.sequence_parallel_attention(*theirs, causal=causal)
    o_plain.backward(do)
    errors = {"o vs definition": rel(o, definition(q, k, v, causal, rank, WORLD)), "o": rel(o, o_plain)}
    for name, x, y, want in zip(("dq", "dk", "dv"), ours, theirs, definition_gradients(q, k, v, do, causal, rank, WORLD)):
        errors[name] = rel(x.grad, y.grad)
        errors[name + " vs definition"] = rel(x.grad, want)
        errors[name + " plain vs definition"] = rel(y.grad, want)
    ok = max(errors.values()) < TOLERANCE and o.shape == q.shape
    line = (f"rank {rank} shape {shape} causal={causal} {strategy}: " + ", ".join(f"{n} {e:.2e}" for n, e in errors.items())
            + ("" if ok else "  FAILED"))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return ok


def run(rank, wt):
    from weft.torch import plain

    strategies_seen = []
    lib = torch.library.Library("weft", "IMPL")

    def kernel(q, k, v, causal=False, strategy=0):
        strategies_seen.append(strategy)
        return definition(q, k, v, causal, rank, WORLD)

    lib.impl("ag_attention", kernel, "CPU")
    ok = True
    # tokens per rank, batch (0: 3-D [t, h, d]), heads, kv heads (GQA and MHA), head dim
    for shape in ((8, 0, 4, 2, 16), (6, 2, 2, 2, 8)):
        for causal in (False, True):
            for strategy in ("default", "tilelink"):
                ok &= check(rank, wt, plain, shape, causal, strategy)
    # "default" takes the plain-torch path (weft.torch.ops.attention_default_is_plain): only the
    # explicit strategy reaches the op.
    ok &= strategies_seen == [wt.strategy_id("tilelink")] * 4
    if not ok and rank == 0:
        print(f"the op saw strategies {strategies_seen}")
    lib._destroy()
    return ok


if __name__ == "__main__":
    sys.exit(gloo_world.main(run))
