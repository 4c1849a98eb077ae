"""Sequence-parallel attention through PyTorch on the GPU (world 1 here; several GPUs under torchrun,
as test_torch.py): torch.ops.weft.ag_attention with every strategy, GQA and MHA, causal or not, 3-D
and 4-D (batch) layouts, on fresh random inputs per rank, the result's memory poisoned (NaN) before
each call, against every rank's keys and values gathered and SDPA in fp32 (plain.py's
attention_over_gathered); and weft.torch.SequenceParallelAttention forward and backward against the
same attention in plain torch (plain.sequence_parallel_attention). The slowest rank's error decides."""

import zlib

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
import weft.torch as wt  # noqa: E402
from weft.torch import plain  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def communicator(weft_on_this_gpu):
    return weft_on_this_gpu


def rank():
    return wt.communicator().rank


def rel(got, want):
    """The relative error's maximum over the ranks (collective: every rank calls it, NaN or not)."""
    got, want = got.double(), want.double()
    error = float("inf") if torch.isnan(got).any() else ((got - want).norm() / want.norm()).item()
    return checking.slowest(error)


def random_bf16(shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda").to(torch.bfloat16)


# tokens per rank, batch (0: [t, h, d]), heads, kv heads, head dim
SHAPES = [(256, 0, 8, 2, 128), (200, 2, 4, 4, 64), (130, 1, 4, 1, 128)]


@pytest.mark.parametrize("strategy", ["default", "auto", "sequential", "decomposed", "tilelink"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_op_matches_sdpa_over_every_rank_s_keys(shape, causal, strategy):
    tokens, batch, heads, kv_heads, d = shape
    lead = (tokens, batch) if batch else (tokens,)
    for call in range(2):  # the second call reuses the op (and may replay its graph)
        seed = 1000 * call + 10 * rank() + zlib.crc32(repr((shape, causal, strategy)).encode()) % 997
        q, k, v = random_bf16(lead + (heads, d), seed), random_bf16(lead + (kv_heads, d), seed + 1), random_bf16(lead + (kv_heads, d), seed + 2)
        torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: the result's block, poisoned
        o = wt.ops.ag_attention(q, k, v, causal, strategy)
        wt.synchronize()
        assert o.shape == q.shape and o.dtype == torch.bfloat16
        want = plain.attention_over_gathered(q.float(), wt.layers.all_gather_rows(k).float(), wt.layers.all_gather_rows(v).float(), causal, rank())
        error = rel(o, want)
        print(f"ag_attention {shape} causal={causal} {strategy} call {call} world {wt.world_size()}: {error:.2e}")
        assert error < 8e-3, error


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_is_plain_torch_s_attention_bit_for_bit(causal):
    """"default" runs plain torch's all_gather + SDPA (attention_default_is_plain), forward and
    backward: its forward bit for bit what plain.sequence_parallel_attention gives, which weft's
    kernel's does not."""
    assert wt.ops.attention_default_is_plain("default") and not wt.ops.attention_default_is_plain("auto")
    tokens, batch, heads, kv_heads, d = 256, 2, 8, 2, 128
    seed = 91 + 10 * rank()
    q, k, v = (random_bf16((tokens, batch, h, d), seed + i) for i, h in enumerate((heads, kv_heads, kv_heads)))
    do = random_bf16((tokens, batch, heads, d), seed + 5)
    with torch.no_grad():
        torch.testing.assert_close(wt.ops.ag_attention(q, k, v, causal, "default"), plain.sequence_parallel_attention(q, k, v, causal), rtol=0, atol=0)
        kernel = wt.ops.ag_attention(q, k, v, causal, "auto")
        assert not torch.equal(kernel, plain.sequence_parallel_attention(q, k, v, causal)), "weft's kernel gave SDPA's bits: the test cannot tell them apart"
    ours, theirs = ([x.clone().requires_grad_() for x in (q, k, v)] for _ in range(2))
    wt.SequenceParallelAttention(causal)(*ours).backward(do)
    plain.sequence_parallel_attention(*theirs, causal=causal).backward(do)
    # SDPA's backward may accumulate in a different order from call to call: close, not bit for bit.
    errors = [rel(x.grad, y.grad) for x, y in zip(ours, theirs)]
    assert max(errors) < 1e-2, errors


@pytest.mark.parametrize("strategy", ["default", "auto", "tilelink"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_layer_forward_and_backward_match_plain_torch(causal, strategy):
    tokens, batch, heads, kv_heads, d = 256, 2, 8, 2, 128
    seed = 77 + 10 * rank()
    q, k, v = (random_bf16((tokens, batch, h, d), seed + i) for i, h in enumerate((heads, kv_heads, kv_heads)))
    do = random_bf16((tokens, batch, heads, d), seed + 5)
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    o = wt.SequenceParallelAttention(causal, strategy)(*ours)
    o.backward(do)
    theirs = [x.clone().requires_grad_() for x in (q, k, v)]
    o_plain = plain.sequence_parallel_attention(*theirs, causal=causal)
    o_plain.backward(do)
    wt.synchronize()
    errors = {"o": rel(o, o_plain)}
    errors.update({name: rel(x.grad, y.grad) for name, x, y in zip(("dq", "dk", "dv"), ours, theirs)})
    print(f"attention layer causal={causal} {strategy} world {wt.world_size()}: {errors}")
    assert max(errors.values()) < 2e-2, errors


def test_wrong_inputs_are_refused_before_any_launch():
    q = random_bf16((64, 4, 64), 1)
    with pytest.raises(ValueError, match="q is torch.float32"):
        torch.ops.weft.ag_attention(q.float(), q, q, False, 0)
    with pytest.raises(ValueError, match="k and v must be q's shape with kv_heads"):
        torch.ops.weft.ag_attention(q, q[:, :3].contiguous(), q, False, 0)
    with pytest.raises(ValueError, match="head_dim=96 has no GPU kernel"):
        x = random_bf16((64, 4, 96), 2)
        torch.ops.weft.ag_attention(x, x, x, False, 0)
    with pytest.raises(ValueError, match="must be contiguous"):
        x = random_bf16((4, 64, 64), 3).transpose(0, 1)
        torch.ops.weft.ag_attention(x, x, x, False, 0)


def test_the_attention_benchmark_verifies_and_times_every_variant(tmp_path):
    if wt.world_size() > 1:
        pytest.skip("run by hand under torchrun at world > 1")
    import csv
    import os
    import subprocess
    import sys

    csv_path = tmp_path / "attention.csv"
    done = subprocess.run([sys.executable, "-m", "weft.benchmark", "--attention", "1024x1x8x2x128,512x2x4x4x64", "--iterations", "3",
                           "--warmup", "1", "--csv", str(csv_path)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 2 * 2 * 6, rows  # two shapes, causal or not, torch and five weft variants
    assert {r["variant"] for r in rows} == {"torch"} | {"weft:" + s for s in ("sequential", "decomposed", "tilelink", "auto", "default")}, rows
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["relative_error"]) < 2e-2 and "TFLOP/s" in r["note"], r
