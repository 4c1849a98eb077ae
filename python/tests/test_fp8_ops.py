"""FP8 through torch.ops.weft.{ag_gemm,gemm_rs,gemm_ar} without a GPU: the fake (meta) kernels'
shapes and dtypes, their refusals (each naming the argument and what it must be), tracing with
make_fx in fake mode, and the Python functions' own refusals. The GPU runs are test_fp8_torch.py."""

import types

import pytest

torch = pytest.importorskip("torch")
try:
    import weft.torch as wt
    from weft.torch import comm
except Exception as e:  # a torch without CUDA, or no native module
    pytest.skip(f"weft.torch does not import here: {e}", allow_module_level=True)

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

WORLD = 4
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@pytest.fixture(autouse=True)
def world_of_four(monkeypatch):
    """The fake kernels ask weft's communicator its size only."""
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=WORLD, rank=0))


def meta(*shape, dtype=E4M3):
    return torch.empty(shape, dtype=dtype, device="meta")


def op(kind):
    return getattr(torch.ops.weft, kind)


ROWS, N, K = 64, 96, 128
OUT_ROWS = {"ag_gemm": WORLD * ROWS, "gemm_rs": ROWS // WORLD, "gemm_ar": ROWS}


@pytest.mark.parametrize("kind", ["ag_gemm", "gemm_rs", "gemm_ar"])
@pytest.mark.parametrize("out_dtype, want", [(None, torch.bfloat16), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)])
@pytest.mark.parametrize("row_wise", [False, True])
def test_fp8_calls_give_the_collectives_shape_in_out_dtype(kind, out_dtype, want, row_wise):
    a, b = meta(ROWS, K), meta(N, K)
    scale_a = meta(ROWS, 1, dtype=torch.float32) if row_wise else meta(dtype=torch.float32)
    scale_b = meta(1, N, dtype=torch.float32) if row_wise else meta(1, dtype=torch.float32)
    got = op(kind)(a, b, 0, scale_a, scale_b, out_dtype)
    assert got.shape == (OUT_ROWS[kind], N) and got.dtype == want


def test_e5m2_gradients_times_e4m3_weights_are_taken():
    got = op("gemm_rs")(meta(ROWS, K, dtype=E5M2), meta(N, K), 0, meta(dtype=torch.float32), meta(dtype=torch.float32), torch.float32)
    assert got.shape == (ROWS // WORLD, N) and got.dtype == torch.float32


def test_bf16_calls_are_unchanged():
    a, b = meta(ROWS, K, dtype=torch.bfloat16), meta(N, K, dtype=torch.bfloat16)
    assert op("gemm_ar")(a, b).dtype == torch.bfloat16
    assert op("gemm_ar")(a, b, 0, None, None, torch.bfloat16).shape == (ROWS, N)


def _bad_calls():
    f32 = torch.float32
    bf = torch.bfloat16
    one, per_row, per_col = meta(dtype=f32), meta(ROWS, 1, dtype=f32), meta(1, N, dtype=f32)
    a, b = meta(ROWS, K), meta(N, K)
    return [
        ((a, b, 0, None, one), "scale_a is needed"),
        ((a, b, 0, one, None), "scale_b is needed"),
        ((a, meta(N, K, dtype=bf), 0, one, one), "B is torch.bfloat16; A is FP8 here, so B must be torch.float8_e4m3fn"),
        ((meta(ROWS, K, dtype=E5M2), meta(N, K, dtype=E5M2), 0, one, one), "e5m2 x e5m2"),
        ((a, b, 0, meta(dtype=bf), one), "scale_a is torch.bfloat16; the scales are torch.float32"),
        ((a, b, 0, one, meta(dtype=torch.float64)), "scale_b is torch.float64"),
        ((a, b, 0, one, per_col), r"scale_a must be one per row of A: \[64, 1\] float32, got \[\]"),
        ((a, b, 0, meta(ROWS - 1, 1, dtype=f32), per_col), r"\[64, 1\] float32, got \[63, 1\]"),
        ((a, b, 0, per_row, meta(1, N - 1, dtype=f32)), r"scale_b must be one float32 .* or one per column of the output \(\[1, 96\]"),
        ((a, b, 0, per_row, one), r"scale_a must be one too .* got \[64, 1\]"),
        ((a, b, 0, one, one, torch.float16), "out_dtype torch.float16 is not taken: FP8 products give torch.bfloat16 or torch.float32"),
        ((a, b, 0, one, one, E4M3), "out_dtype torch.float8_e4m3fn is not taken"),
        ((a, meta(K, N).t(), 0, one, one), r"FP8 B must be row-major \[n, k\]"),
        ((meta(ROWS, K, dtype=bf), meta(N, K, dtype=bf), 0, one, None), "scale_a is given, but A is not FP8"),
        ((meta(ROWS, K, dtype=bf), meta(N, K, dtype=bf), 0, None, None, torch.float32), "out_dtype torch.float32 is not taken: bfloat16"),
    ]


@pytest.mark.parametrize("kind", ["ag_gemm", "gemm_rs", "gemm_ar"])
@pytest.mark.parametrize("args, words", _bad_calls(), ids=range(len(_bad_calls())))
def test_bad_fp8_arguments_are_refused_naming_what_is_wrong(kind, args, words):
    with pytest.raises(ValueError, match=words):
        op(kind)(*args)


def test_an_fp8_call_traces_in_fake_mode_with_its_dtype():
    def layer(x, w, sx, sw):
        return torch.relu(torch.ops.weft.gemm_ar(x, w, 0, sx, sw, torch.float32))

    x = torch.randn(ROWS, K).to(E4M3)
    w = torch.randn(N, K).to(E4M3)
    sx, sw = torch.rand(ROWS, 1), torch.rand(1, N)
    gm = make_fx(layer, tracing_mode="fake")(x, w, sx, sw)
    nodes = [n for n in gm.graph.nodes if str(n.target).startswith("weft.gemm_ar")]
    assert len(nodes) == 1
    val = nodes[0].meta["val"]
    assert val.shape == (ROWS, N) and val.dtype == torch.float32


def test_the_python_functions_refuse_what_fp8_does_not_take_yet():
    a, b, s = torch.empty(ROWS, K, dtype=E4M3), torch.empty(N, K, dtype=E4M3), torch.ones(())
    with pytest.raises(ValueError, match="FP8 calls .* do not take out="):
        wt.ops.gemm_ar(a, b, out=torch.empty(ROWS, N, dtype=torch.bfloat16), scale_a=s, scale_b=s)
    with pytest.raises(ValueError, match="return_a is not taken with FP8 scales"):
        wt.ops.ag_gemm(a, b, return_a=True, scale_a=s, scale_b=s)
