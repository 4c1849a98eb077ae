"""One way to check a weft result from Python: outputs poisoned (NaN) before every call, fresh
inputs per call from their own generator (never all zero: checked), and a per-element error bound
scaled by the magnitude of the summed terms, as the CPU proof (src/reference/cpu_proof.cpp) does:

    |got - want| <= EPS * terms * sum_k |a_ik| |b_jk|

with want computed in float64 from the same bf16 inputs, EPS the rounding unit of the bf16 result
(2^-8) with a factor 2 of margin, and `terms` the roundings a value goes through (1 for a GEMM, the
world size plus one where partial sums are rounded to bf16 and added across ranks)."""

import torch

EPS = 2.0 ** -7


def inputs(rows, cols, seed, device="cuda"):
    """Uniform in [-1, 1), bf16, from a generator of its own (not the one the reference uses)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.rand((rows, cols), generator=g, dtype=torch.float64) * 2 - 1).to(torch.bfloat16)
    assert x.float().abs().mean() > 0.2, "the input generator produced (near) zeros"
    return x.to(device)


def poisoned(shape, like):
    """An output buffer full of NaN: a call that writes nothing leaves NaN, which no check passes."""
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device=like.device)


def reference(a, b):
    """(a @ b.T in float64, sum |a| |b|^T in float64), both on the CPU."""
    a64, b64 = a.double().cpu(), b.double().cpu()
    return a64 @ b64.t(), a64.abs() @ b64.abs().t()


def _other_ranks_failed(failed):
    """How many other ranks of torch.distributed's world failed the check this rank is at (0 without
    a process group of several ranks). Collective: every rank calls it at the same check, so that a
    check failing on one rank fails on all, and no rank runs ahead into the next call or collective
    while the others are still in this test (which would hang or fail every later test)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 0
    count = torch.tensor([1.0 if failed else 0.0], device="cuda")
    dist.all_reduce(count)
    return int(count.item()) - (1 if failed else 0)


def slowest(value):
    """value's maximum over torch.distributed's ranks (itself without a process group): an error
    every rank then compares with the same bound (collective, as _other_ranks_failed)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def assert_close(got, want, scale, terms=1, what="result"):
    """Per element: |got - want| <= EPS * terms * scale (+ a denormal floor); NaN fails. Collective
    where torch.distributed spans several ranks: fails on every rank when it fails on any."""
    try:
        _assert_close_here(got, want, scale, terms, what)
        failure = None
    except AssertionError as e:
        failure = e
    others = _other_ranks_failed(failure is not None)
    if failure is not None:
        raise AssertionError(f"{failure}" + (f" (and on {others} other rank(s))" if others else "")) from None
    if others:
        raise AssertionError(f"{what}: passed on this rank, failed on {others} other rank(s) (see their output)")


def _assert_close_here(got, want, scale, terms, what):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert want.abs().max() > 0, f"{what}: the expected result is all zero; the check would prove nothing"
    got64 = got.double().cpu()
    assert not torch.isnan(got64).any(), f"{what}: NaN in the result ({int(torch.isnan(got64).sum())} elements): not written?"
    bound = EPS * terms * scale + 1e-30
    error = (got64 - want).abs()
    bad = error > bound
    if bad.any():
        i, j = [int(v) for v in bad.nonzero()[0]]
        raise AssertionError(f"{what}: {int(bad.sum())} of {got64.numel()} elements beyond the bound; first at [{i}, {j}]: "
                             f"got {got64[i, j].item():.6g}, expected {want[i, j].item():.6g}, bound {bound[i, j].item():.3g}")


def fp8_mlp_errors(layer, x, xw, z, dz, sequence_parallel, recipe, rel):
    """{what: rel(weft's, plain's)} for weft's FP8 TensorParallelMLP `layer` (its output z of input
    xw, a copy of x, after z.backward(dz)) against the same recipe in plain torch (weft/torch/plain.py)
    with the same weights: the output and every gradient."""
    from weft.torch import plain

    xp = x.clone().requires_grad_()
    up, down = (p.detach().clone().requires_grad_() for p in (layer.up.weight, layer.down.weight))
    zp = plain.fp8_mlp(xp, up, down, sequence_parallel, recipe)
    zp.backward(dz)
    return {"output": rel(z, zp), "dx": rel(xw.grad, xp.grad), "dW_up": rel(layer.up.weight.grad, up.grad),
            "dW_down": rel(layer.down.weight.grad, down.grad)}
