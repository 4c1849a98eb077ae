"""The FP8 TP MLP at world 2 on the CPU (run by test_fp8_layers.py; python fp8_world_of_two.py runs
it alone): two processes over torch.distributed's gloo, weft's communicator a stand-in of two ranks
on that group, and weft's ops as CPU kernels by their definitions at world 2: the bf16 ops the GEMM
and torch.distributed's collective; FP8 as plan/gpu_lowering.hpp lets it run above world 1 (ag_gemm
gathers the FP8 rows and their scales, then the FP8 GEMM; gemm_rs and gemm_ar run the FP8 GEMM and
reduce its bf16 partial sums), except the strategies in DECLINING. Each rank checks weft's layer, forward and every
gradient, against the same recipe in plain torch (weft/torch/plain.py); exit status 0 where every
check on every rank passed. Rank 1's input is 8 times rank 0's, so that a tensor-wise scale that
is not shared across the ranks (amax over every rank's rows) shows."""

import sys
import warnings

import torch
import torch.distributed as dist

import checking  # this folder's (python/tests)
import gloo_world

WORLD = gloo_world.WORLD
# The stand-in declines FP8 for these strategies, to exercise the layer's fallback (torch's pieces and a
# warning): since the overlap GEMM's FP8 main loop no real strategy declines all three ops with tensor
# or row scales (tilelink declines ag_gemm, whose companion moves bf16 rows only).
DECLINING = {"chunked"}
TOLERANCE = 4e-3  # test_fp8_layers.py's


def _decline(name, strategy):
    raise ValueError(f"weft.{name}: strategy '{strategy}' declines e4m3 here on the GPU: no FP8 row movement (stand-in)")


def register_ops(ops):
    """weft's ag_gemm, ag_gemm_gathered, gemm_rs and gemm_ar as CPU kernels at world 2 (see the module)."""
    from weft.torch.comm import all_gather_rows

    declining = {ops.strategy_id(s): s for s in DECLINING}
    fp8_types = (torch.float8_e4m3fn, torch.float8_e5m2)

    def product(name, a, b, scale_a, scale_b, out_dtype):
        n, k = b.shape
        assert a.is_contiguous() and b.stride() in ((k, 1), (1, n)), (name, a.stride(), b.stride())
        if a.dtype not in fp8_types:
            return torch.mm(a, b.t())
        out_dtype = ops._fake_out_dtype(name, a, b, scale_a, scale_b, out_dtype)
        per_row_a = scale_a.reshape(-1, 1) if scale_a.numel() > 1 else scale_a.reshape(())
        per_row_b = scale_b.reshape(-1, 1) if scale_b.numel() > 1 else scale_b.reshape(())
        return torch.mm(a.double() * per_row_a.double(), (b.double() * per_row_b.double()).t()).to(out_dtype)

    def ag_gemm(a, b, strategy=0, scale_a=None, scale_b=None, out_dtype=None):
        if a.dtype not in fp8_types:
            return product("ag_gemm", all_gather_rows(a), b, None, None, None)
        if strategy in declining:
            _decline("ag_gemm", declining[strategy])
        # The FP8 rows' bytes and their row scales gathered (a tensor scale is every rank's already).
        gathered = all_gather_rows(a.view(torch.uint8)).view(a.dtype)
        gathered_scale = all_gather_rows(scale_a.reshape(-1, 1)) if scale_a.numel() > 1 else scale_a
        return product("ag_gemm", gathered, b, gathered_scale, scale_b, out_dtype)

    def ag_gemm_gathered(a, b, strategy=0):
        gathered = all_gather_rows(a)
        return product("ag_gemm", gathered, b, None, None, None), gathered

    def reduced(name):
        def kernel(a, b, strategy=0, scale_a=None, scale_b=None, out_dtype=None):
            if a.dtype in fp8_types and strategy in declining:
                _decline(name, declining[strategy])
            partial = product(name, a, b, scale_a, scale_b, out_dtype)
            if name == "gemm_ar":
                dist.all_reduce(partial)
                return partial
            out = partial.new_empty((partial.shape[0] // WORLD, partial.shape[1]))
            dist.reduce_scatter_tensor(out, partial)
            return out

        return kernel

    lib = torch.library.Library("weft", "IMPL")
    for name, kernel in (("ag_gemm", ag_gemm), ("ag_gemm_gathered", ag_gemm_gathered), ("gemm_rs", reduced("gemm_rs")),
                         ("gemm_ar", reduced("gemm_ar"))):
        lib.impl(name, kernel, "CPU")
    return lib


def varied(rows, cols, seed, size=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=g, dtype=torch.float64) * 2 - 1
    return (x * size * 2.0 ** torch.randint(-4, 5, (rows, 1), generator=g)).to(torch.bfloat16)


def rel(got, want):
    got, want = got.double(), want.double()
    if torch.isnan(got).any() or want.abs().max() == 0:
        return float("inf")
    return ((got - want).norm() / want.norm()).item()


def check(rank, wt, recipe, sequence_parallel, strategy, save_gathered_input):
    torch.manual_seed(7 + rank)  # each rank's own weight shards
    layer = wt.TensorParallelMLP(64, 128, sequence_parallel, strategy, "cpu", save_gathered_input=save_gathered_input, fp8=recipe)
    own = rank if sequence_parallel else 0  # without sequence parallelism both ranks hold the same x
    rows = 32 if sequence_parallel else 32 * WORLD
    x, dz = varied(rows, 64, 3 + own, size=8.0 ** own), varied(rows, 64, 5 + own)
    xw = x.clone().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z = layer(xw)
    z.backward(dz)
    errors = checking.fp8_mlp_errors(layer, x, xw, z, dz, sequence_parallel, recipe, rel)
    warned = sorted({str(w.message).split(" with strategy")[0].split(": ")[-1] for w in caught if "weft.torch" in str(w.message)})
    # Only the strategies in DECLINING decline: ag_gemm and gemm_rs (sequence parallel) or gemm_ar.
    want_warned = ((["ag_gemm", "gemm_rs"] if sequence_parallel else ["gemm_ar"]) if strategy in DECLINING else [])
    ok = max(errors.values()) < TOLERANCE and warned == sorted(want_warned)
    line = (f"rank {rank} {recipe.scaling}/{recipe.backward} sp={sequence_parallel} saved={save_gathered_input} {strategy}: "
            + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()) + f"; warned for {warned}" + ("" if ok else "  FAILED"))
    sys.stdout.write(line + "\n")  # one write: the two ranks' lines do not interleave
    sys.stdout.flush()
    return ok


def run(rank, wt):
    from weft.torch import fp8, ops

    lib = register_ops(ops)
    ok = True
    for recipe in (wt.Float8Recipe("tensorwise"), wt.Float8Recipe("rowwise"), wt.Float8Recipe("tensorwise", "fp8"), wt.Float8Recipe("rowwise", "fp8")):
        for sequence_parallel, save in ((True, False), (True, True), (False, False)):
            for strategy in ("default", "chunked"):
                fp8._declined.clear()  # each case warns afresh
                ok &= check(rank, wt, recipe, sequence_parallel, strategy, save)
    lib._destroy()
    return ok


if __name__ == "__main__":
    sys.exit(gloo_world.main(run))
