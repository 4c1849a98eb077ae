"""FP8 torch ops on the GPU (world 1 here; several GPUs under torchrun, as test_torch.py): each of
torch.ops.weft.{ag_gemm,gemm_rs,gemm_ar} with float8_e4m3fn operands and tensor- or row-wise scales
against an fp64 reference of the dequantized product (per element, bound by the summed terms'
magnitude: checking.py) and against torch._scaled_mm followed by torch.distributed's collective.
Fresh random inputs per case and rank; the result's memory poisoned (NaN) before each call. A
strategy whose FP8 plan the executor cannot lower must refuse with ValueError naming why. The TP
MLP with an FP8 recipe (fp8=Float8Recipe) forward and backward against the same recipe in plain
torch (weft/torch/plain.py), with the same weights."""

import warnings
import zlib

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
import weft  # noqa: E402
import weft.torch as wt  # noqa: E402

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


@pytest.fixture(scope="module", autouse=True)
def communicator(weft_on_this_gpu):
    return weft_on_this_gpu


def seed_of(*words):
    return zlib.crc32(" ".join(map(str, words)).encode()) % (1 << 30)


def quantize(x, row_wise, same_on_every_rank=False):
    """(x in e4m3, its fp32 dequantization scale): one per row ([rows, 1]) or one for all (0-d; with
    same_on_every_rank the amax over every rank's x, as a gathered A's tensor scale must be)."""
    x = x.float()
    if row_wise:
        amax = x.abs().amax(dim=1, keepdim=True)
    else:
        amax = x.abs().amax()
        if same_on_every_rank and wt.world_size() > 1:
            torch.distributed.all_reduce(amax, op=torch.distributed.ReduceOp.MAX, group=wt.process_group())
    scale = (amax / E4M3_MAX).clamp(min=1e-12)
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale.float().contiguous()


def varied(rows, cols, seed):
    """Uniform inputs whose rows differ in size by up to 2^6, so that row-wise scales matter."""
    x = checking.inputs(rows, cols, seed=seed).float()
    g = torch.Generator(device="cpu").manual_seed(seed + 7)
    return x * (2.0 ** torch.randint(-3, 4, (rows, 1), generator=g)).to(x.device)


def poison_next(shape, dtype):
    """Fills and frees a block of the result's size, so that the caching allocator hands that NaN
    block to the op's result: a call that writes nothing leaves NaN, which no check passes."""
    torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def collective(op, x):
    """torch.distributed's reduction of op (gemm_rs, gemm_ar) over every rank's partial product x."""
    world, group = wt.world_size(), wt.process_group()
    if world == 1:
        return x
    if op == "gemm_ar":
        x = x.clone()
        torch.distributed.all_reduce(x, group=group)
        return x
    out = x.new_empty((x.shape[0] // world, x.shape[1]))
    torch.distributed.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def reference(op, deq_a, deq_b):
    """(the op in fp64 from every rank's dequantized operands, sum |a||b| per element, roundings)."""
    world, rank = wt.world_size(), wt.communicator().rank
    a_all, b_all = wt.layers.all_gather_rows(deq_a), wt.layers.all_gather_rows(deq_b)
    if op == "ag_gemm":
        return (*checking.reference(a_all, deq_b), 1)
    parts = [checking.reference(x, y) for x, y in zip(a_all.chunk(world), b_all.chunk(world))]
    total, scale = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if op == "gemm_rs":
        total, scale = total.chunk(world)[rank], scale.chunk(world)[rank]
    return total, scale, world + 1


def cases():
    out = []
    for name, _, _, ops in weft.strategies():
        for op in ops:
            if op in ("ag_gemm", "gemm_rs", "gemm_ar"):
                out.append((op, name))
    return out + [(op, "default") for op in ("ag_gemm", "gemm_rs", "gemm_ar")]


@pytest.mark.parametrize("row_wise", [False, True], ids=["tensor", "row"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("op, strategy", cases())
def test_fp8_ops_match_scaled_mm_and_the_collective(op, strategy, out_dtype, row_wise):
    world, rank = wt.world_size(), wt.communicator().rank
    rows, n, k = (64 * world if op == "gemm_rs" else 200), 272, 384
    for call in range(2):  # the second call may replay a captured graph: checked as well
        seed = seed_of(op, strategy, out_dtype, row_wise, rank, call)
        a, scale_a = quantize(varied(rows, k, seed), row_wise, same_on_every_rank=op == "ag_gemm")
        b, scale_w = quantize(varied(n, k, seed + 1), row_wise)
        scale_b = scale_w.reshape(1, n) if row_wise else scale_w  # one per output column
        out_rows = {"ag_gemm": world * rows, "gemm_rs": rows // world, "gemm_ar": rows}[op]
        poison_next((out_rows, n), out_dtype)
        try:
            got = getattr(wt.ops, op)(a, b, strategy, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
        except ValueError as e:
            # Declined: only where the executor has no lowering for the plan (never at world 1).
            assert world > 1 and ("declines" in str(e) or "no strategy runs" in str(e)), str(e)
            # sequential (and default: auto over what runs) declines only f32 partial sums to reduce:
            # ag_gemm's NCCL gather of FP8 rows and their scales runs, to either output dtype.
            assert strategy not in ("sequential", "default") or (op != "ag_gemm" and out_dtype == torch.float32), str(e)
            return
        assert got.dtype == out_dtype and got.shape == (out_rows, n)
        deq_a, deq_b = a.float() * scale_a, b.float() * scale_w
        want, scale, terms = reference(op, deq_a, deq_b)
        checking.assert_close(got, want, scale, terms, f"{op} {strategy} call {call} vs fp64")
        # torch's own: _scaled_mm (b.t(): the column-major [k, n] it takes), then the collective
        # (ag_gemm: the gather first, of A's bytes and row scales).
        try:
            if op == "ag_gemm":
                gathered = wt.layers.all_gather_rows(a.view(torch.uint8)).view(E4M3)
                gathered_scale = wt.layers.all_gather_rows(scale_a) if row_wise else scale_a
                theirs = torch._scaled_mm(gathered, b.t(), scale_a=gathered_scale, scale_b=scale_b, out_dtype=out_dtype)
            else:
                theirs = collective(op, torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype))
        except RuntimeError as e:  # a mode this torch's _scaled_mm does not take (row-wise to f32 on some versions)
            print(f"torch._scaled_mm refused: {e}")
            continue
        checking.assert_close(got, theirs.double().cpu(), scale, 2 * terms, f"{op} {strategy} call {call} vs torch._scaled_mm")


def test_wrong_fp8_inputs_are_refused_before_any_launch():
    a, b = torch.zeros(64, 128, device="cuda").to(E4M3), torch.zeros(128, 128, device="cuda").to(E4M3)
    one = torch.ones((), device="cuda")
    torch.cuda.synchronize()
    bad = [
        ((a, b, 0, one.cpu(), one), "scale_a is not on cuda"),
        ((a, b, 0, torch.ones(64, 2, device="cuda")[:, :1], torch.ones(1, 128, device="cuda")), "scale_a must be contiguous"),
        ((a, b, 0, torch.ones(63, 1, device="cuda"), torch.ones(1, 128, device="cuda")), r"\[64, 1\] float32, got \[63, 1\]"),
        ((a, b, 0, one, None), "scale_b is needed"),
        ((a, b.t(), 0, one, one), r"FP8 B must be row-major \[n, k\]"),
        ((a.view(-1)[1:1 + 63 * 128].view(63, 128), b, 0, one, one), "16-byte"),
        ((torch.zeros(64, 120, device="cuda").to(E4M3), torch.zeros(128, 120, device="cuda").to(E4M3), 0, one, one), "multiples of 16"),
    ]
    for args, words in bad:
        with pytest.raises(ValueError, match=words):
            torch.ops.weft.gemm_ar(*args)
    assert torch.cuda.current_stream().query(), "nothing was launched"


def rel(got, want):
    """The relative error, the largest over the ranks (inf for NaN): every rank asserts on the same value."""
    got, want = got.float(), want.float()
    assert want.abs().max() > 0, "the expected result is all zero"
    error = float("inf") if torch.isnan(got).any() else ((got - want).norm() / want.norm()).item()
    return checking.slowest(error)


# weft's FP8 MLP against the recipe in plain torch: the same FP8 products (weft's op against
# torch._scaled_mm: fp32 sums in another order, one bf16 rounding each) and the same bf16 operands
# in the backward (bf16 GEMMs against fp32 ones, rounded to bf16); FP8's own error is about 5e-2
# (test_fp8_layers.py's test_the_comparison_sees_fp8s_error), so a missing quantization fails.
FP8_LAYER_TOLERANCE = 1e-2


@pytest.mark.parametrize("strategy", ["default", "sequential", "decomposed", "fused"])
@pytest.mark.parametrize("sequence_parallel, save_gathered_input", [(True, False), (True, True), (False, False)], ids=["sp", "sp-saved", "tp"])
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("backward", ["bf16", "fp8"])
def test_the_fp8_mlp_matches_the_recipe_in_plain_torch(scaling, sequence_parallel, save_gathered_input, strategy, backward):
    world, rank = wt.world_size(), wt.communicator().rank
    recipe = wt.Float8Recipe(scaling, backward)
    ops_of = {name: ops for name, _, _, ops in weft.strategies()}
    if strategy != "default" and not all(op in ops_of[strategy] for op in (("ag_gemm", "gemm_rs") if sequence_parallel else ("gemm_ar",))):
        with pytest.raises(ValueError, match=f"strategy '{strategy}' does not implement"):  # refused when the layer is made
            wt.TensorParallelMLP(512, 1024, sequence_parallel, strategy, fp8=recipe)
        return
    torch.manual_seed(5)
    layer = wt.TensorParallelMLP(512, 1024, sequence_parallel, strategy, save_gathered_input=save_gathered_input, fp8=recipe)
    rows = 128 if sequence_parallel else 128 * world
    own = rank if sequence_parallel else 0  # without sequence parallelism every rank holds the same x
    x = varied(rows, 512, seed_of("x", scaling, own)).to(torch.bfloat16)
    dz = varied(rows, 512, seed_of("dz", scaling, own)).to(torch.bfloat16)
    for call in range(2):  # the second call may replay a captured graph, or take a remembered decline
        xw = x.clone().requires_grad_()
        layer.zero_grad()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            z = layer(xw)
        z.backward(dz)
        torch.cuda.synchronize()
        wt.check_errors()
        ours = [str(w.message) for w in caught if "weft.torch" in str(w.message)]
        # At world 1 every strategy runs FP8; above it a declined product names weft's reason.
        assert world > 1 or not ours, ours
        assert all("declines" in m or "no strategy runs" in m for m in ours), ours
        errors = checking.fp8_mlp_errors(layer, x, xw, z, dz, sequence_parallel, recipe, rel)
        print(f"fp8 mlp {scaling} {strategy} sp={sequence_parallel} call {call} world {world}: {errors}")
        assert max(errors.values()) < FP8_LAYER_TOLERANCE, errors


@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_the_fp8_benchmark_verifies_and_times_weft_against_scaled_mm(tmp_path, scaling):
    if wt.world_size() > 1:
        pytest.skip("run by hand under torchrun at world > 1")
    import csv
    import json
    import os
    import subprocess
    import sys

    suite = {"name": "tiny", "description": "FP8 pipeline check", "rows": [
        {"name": "AG", "op": "ag_gemm", "m": 512, "n": 1024, "k": 512},
        {"name": "RS", "op": "gemm_rs", "m": 512, "n": 512, "k": 1024},
        {"name": "AR", "op": "gemm_ar", "m": 512, "n": 512, "k": 1024},
    ]}
    (tmp_path / "tiny.json").write_text(json.dumps(suite))
    csv_path = tmp_path / "fp8.csv"
    done = subprocess.run([sys.executable, "-m", "weft.benchmark", "--suite", str(tmp_path / "tiny.json"), "--fp8", scaling, "--iterations", "3",
                           "--warmup", "1", "--csv", str(csv_path), "--mlp-hidden", "512", "--mlp-ffn", "1024", "--mlp-tokens", "256"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(csv_path.open()))
    timed = [r for r in rows if r["ms"]]
    assert {r["row"] for r in timed} >= {"AG", "RS", "AR"}, rows
    assert any(r["variant"] == "weft:default" for r in timed) and any(r["variant"] == "torch" for r in timed), rows
    for r in timed:
        assert float(r["relative_error"]) < 2e-2, r  # weft's FP8 product against torch._scaled_mm's


def test_the_benchmark_notes_a_declining_strategy_as_declined_not_failed():
    # tilelink's ag_gemm declines e4m3 above world 1 (its companion moves bf16 rows): the table says
    # so, and keeps "failed" for what broke.
    from weft.benchmark import _not_run

    declined = ValueError("strategy 'tilelink' declines e4m3 here on the GPU: rank 0: copy step 'copy own tile 0' touches e4m3 data\nmore")
    assert _not_run(declined).startswith("declined (strategy 'tilelink' declines e4m3 here on the GPU"), _not_run(declined)
    assert _not_run(RuntimeError("CUDA error: an illegal memory access")) == "failed (RuntimeError: CUDA error: an illegal memory access)"
    assert _not_run(ValueError("bad shape")).startswith("failed (ValueError")
