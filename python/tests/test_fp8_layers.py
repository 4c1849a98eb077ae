"""The FP8 recipe (weft/torch/fp8.py) and the tensor-parallel layers with fp8=Float8Recipe(...), no
GPU needed: the quantization against its definition computed in float64 (scales from amax,
saturation, zero tensors, row-wise scales), and the layers at world 1 on the CPU with weft's ops
as CPU kernels by their definitions (the FP8 arguments honoured and checked as the fake kernels
check them), forward and every gradient against the same recipe written in plain torch
(weft/torch/plain.py), relative errors recorded (record_property, and printed with -s); and the MLP
at world 2 over gloo (fp8_world_of_two.py: ag_gemm declining FP8 as it does above world 1, the
amax shared across ranks, the FP8 rows gathered by torch.distributed). The same layers on GPUs, at
world 1 and under torchrun, are test_fp8_torch.py's."""

import re
import types
import warnings

import pytest

import gloo_world  # this folder's (python/tests)

torch = pytest.importorskip("torch")

try:
    import weft.torch as wt  # noqa: F401
    from weft.torch import comm, fp8, ops, plain
except Exception as e:  # the native module without a usable libtorch
    pytest.skip(f"weft.torch does not import here: {e}", allow_module_level=True)

E4M3 = torch.float8_e4m3fn
RECIPES = [fp8.Float8Recipe("tensorwise"), fp8.Float8Recipe("rowwise")]
# The same with the input gradients' products in FP8 too (e5m2 gradients).
FP8_BACKWARD_RECIPES = [fp8.Float8Recipe("tensorwise", "fp8"), fp8.Float8Recipe("rowwise", "fp8")]
# Relative error (Frobenius) of weft's FP8 layer against the recipe in plain torch: the two differ
# only in the order of fp32 sums and where bf16 roundings fall (about 2^-9 each); FP8's own
# error (e4m3: 3 mantissa bits) is an order larger, so a missing or wrong quantization fails.
TOLERANCE = 4e-3


def e4m3_of(v):
    """float64 values rounded to float8_e4m3fn's grid (to nearest, ties to even), in float64: the
    definition, written without torch's cast. v must lie within [-448, 448]."""
    magnitude = v.abs()
    exponent = torch.floor(torch.log2(magnitude.clamp(min=2.0 ** -9))).clamp(min=-6)  # subnormals below 2^-6
    step = 2.0 ** (exponent - 3)
    return torch.round(v / step) * step


def varied(rows, cols, seed):
    """bf16 uniform in [-1, 1) with rows differing in size by up to 2^8 (row-wise scales matter)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=g, dtype=torch.float64) * 2 - 1
    return (x * 2.0 ** torch.randint(-4, 5, (rows, 1), generator=g)).to(torch.bfloat16)


def rel(got, want):
    got, want = got.double(), want.double()
    assert want.abs().max() > 0, "the expected result is all zero"
    assert not torch.isnan(got).any(), "NaN in the result"
    return ((got - want).norm() / want.norm()).item()


# ---- the recipe's quantization ----

@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.scaling)
def test_quantization_is_its_float64_definition(recipe):
    x = varied(96, 160, seed=1)
    q = fp8.quantize(x, recipe)
    x64 = x.double()
    amax = x64.abs().amax(dim=1, keepdim=True) if recipe.rowwise else x64.abs().amax()
    want_scale = amax / 448.0
    assert q.scale.dtype == torch.float32 and q.scale.shape == want_scale.shape
    assert torch.allclose(q.scale.double(), want_scale, rtol=2.0 ** -23, atol=0)
    # x / scale as the recipe divides (fp32), saturated, rounded to e4m3 by the definition above
    quotient = (x.float() / q.scale).double()
    assert quotient.abs().max() <= 448 * (1 + 2.0 ** -22)
    want = e4m3_of(quotient.clamp(-448, 448))
    assert q.data.dtype == E4M3 and torch.equal(q.data.double(), want)
    assert (q.data.double().abs().amax(dim=-1) == 448).all() if recipe.rowwise else q.data.double().abs().max() == 448
    # dequantized: x to within e4m3's half step (2^-4 relative to the value, 2^-10 scale below 2^-6)
    err = (q.dequantize(torch.float32).double() - x64).abs()
    assert (err <= 2.0 ** -4 * x64.abs() + 2.0 ** -10 * q.scale.double() * 1.001).all()


def test_values_beyond_the_scale_saturate_to_448_never_nan():
    scale = torch.tensor(0.5)
    x = torch.tensor([[224.0, 225.0, 239.0, 240.0, 1e6, -1e6, -230.0, 0.0]])
    q = fp8.quantize_with(x, scale).data.double()
    assert not torch.isnan(q).any()
    assert q.tolist() == [[448.0, 448.0, 448.0, 448.0, 448.0, -448.0, -448.0, 0.0]]
    assert torch.equal(q, e4m3_of((x.double() / 0.5).clamp(-448, 448)))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.scaling)
def test_zero_tensors_and_rows_get_a_positive_scale_and_zero_values(recipe):
    q = fp8.quantize(torch.zeros(8, 32, dtype=torch.bfloat16), recipe)
    assert (q.scale > 0).all() and torch.isfinite(q.scale).all()
    assert torch.equal(q.data.float(), torch.zeros(8, 32)) and torch.equal(q.dequantize(), torch.zeros(8, 32, dtype=torch.bfloat16))
    x = varied(8, 32, seed=2)
    x[3] = 0
    q = fp8.quantize(x, recipe)
    assert not torch.isnan(q.data.float()).any() and torch.equal(q.data[3].float(), torch.zeros(32))
    if recipe.rowwise:  # a zero row leaves the other rows' scales alone
        others = [i for i in range(8) if i != 3]
        assert torch.equal(q.scale[others], fp8.quantize(x[others], recipe).scale)


def test_a_recipe_names_a_scaling_it_has_and_layers_take_only_recipes(world_of_one_with_fp8_ops):
    with pytest.raises(ValueError, match="scaling must be one of"):
        fp8.Float8Recipe("blockwise")
    with pytest.raises(TypeError, match="Float8Recipe"):
        wt.ColumnParallelLinear(64, 128, device="cpu", fp8="tensorwise")


def test_a_layer_refuses_a_strategy_without_the_ops_it_calls_when_it_is_made(world_of_one_with_fp8_ops):
    """fused has ag_gemm and gemm_rs but no gemm_ar: a sequence-parallel layer takes it, a layer
    without sequence parallelism (gemm_ar) refuses it at construction, naming what it lacks."""
    for kind in ("column", "row", "mlp"):
        layer_of(kind, None, True, strategy="fused")
        with pytest.raises(ValueError, match="strategy 'fused' does not implement gemm_ar, which a layer without sequence parallelism"):
            layer_of(kind, None, False, strategy="fused")
    with pytest.raises(ValueError, match="no strategy 'fastest'"):
        layer_of("mlp", None, True, strategy="fastest")


# ---- the layers at world 1 on the CPU ----

@pytest.fixture
def world_of_one_with_fp8_ops(monkeypatch):
    """A stand-in communicator of one rank and weft's ag_gemm / gemm_rs / gemm_ar as CPU kernels by
    their world-1 definitions (the GEMM alone; FP8: the dequantized product in float64, rounded to
    out_dtype), refusing what the fake kernels refuse. Yields the calls (op, A's dtype, strategy);
    `declining` lists strategies whose FP8 calls decline as plan/gpu_lowering.hpp would."""
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=1, rank=0))
    monkeypatch.setitem(comm._state, "group", None)
    monkeypatch.setattr(fp8, "_declined", {})
    state = types.SimpleNamespace(calls=[], declining=set())
    lib = torch.library.Library("weft", "IMPL")
    for name in ("ag_gemm", "gemm_rs", "gemm_ar"):
        def kernel(a, b, strategy=0, scale_a=None, scale_b=None, out_dtype=None, name=name):
            out_dtype = ops._fake_out_dtype(name, a, b, scale_a, scale_b, out_dtype)
            n, k = b.shape
            assert a.is_contiguous() and b.stride() in ((k, 1), (1, n)), (a.stride(), b.stride())
            state.calls.append((name, a.dtype, strategy))
            if a.dtype not in (E4M3, torch.float8_e5m2):
                return torch.mm(a, b.t())
            if strategy in {ops.strategy_id(s) for s in state.declining}:
                raise ValueError(f"weft.{name}: strategy 'x' declines e4m3 here on the GPU: a copy of e4m3 rows has no lowering")
            per_row_a = scale_a.reshape(-1, 1) if scale_a.numel() > 1 else scale_a.reshape(())
            per_row_b = scale_b.reshape(-1, 1) if scale_b.numel() > 1 else scale_b.reshape(())
            return torch.mm(a.double() * per_row_a.double(), (b.double() * per_row_b.double()).t()).to(out_dtype)

        lib.impl(name, kernel, "CPU")
    yield state
    lib._destroy()


def layer_of(kind, recipe, sequence_parallel, strategy="default", save_gathered_input=False):
    torch.manual_seed(11)
    if kind == "column":
        return wt.ColumnParallelLinear(64, 128, sequence_parallel, strategy, "cpu", save_gathered_input=save_gathered_input, fp8=recipe)
    if kind == "row":
        return wt.RowParallelLinear(128, 64, sequence_parallel, strategy, "cpu", fp8=recipe)
    return wt.TensorParallelMLP(64, 128, sequence_parallel, strategy, "cpu", save_gathered_input=save_gathered_input, fp8=recipe)


def reference(kind, layer, x, recipe, sequence_parallel):
    """(output, dx, [dW...]) of the same recipe in plain torch with the layer's weights."""
    weights = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    xp = x.detach().clone().requires_grad_()
    fn = {"column": plain.fp8_column_parallel, "row": plain.fp8_row_parallel, "mlp": plain.fp8_mlp}[kind]
    return xp, weights, fn(xp, *weights, sequence_parallel, recipe)


def run_both(kind, recipe, sequence_parallel, record_property, strategy="default", save_gathered_input=False, layer=None):
    layer = layer or layer_of(kind, recipe, sequence_parallel, strategy, save_gathered_input)
    width = 128 if kind == "row" else 64
    x = varied(48, width, seed=3)
    dz = varied(48, 128 if kind == "column" else 64, seed=4)
    xw = x.clone().requires_grad_()
    z = layer(xw)
    z.backward(dz)
    xp, weights, zp = reference(kind, layer, x, recipe, sequence_parallel)
    zp.backward(dz)
    errors = {"output": rel(z, zp), "dx": rel(xw.grad, xp.grad)}
    for (name, p), w in zip(layer.named_parameters(), weights):
        errors["d" + name] = rel(p.grad, w.grad)
    for what, error in errors.items():
        record_property(f"rel_{what}", error)
    print(f"{kind} {recipe.scaling if recipe else 'bf16'} sp={sequence_parallel}: " + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    return errors, z


@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sp", "tp"])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.scaling)
@pytest.mark.parametrize("kind", ["column", "row", "mlp"])
def test_fp8_layers_match_the_recipe_in_plain_torch(world_of_one_with_fp8_ops, kind, recipe, sequence_parallel, record_property):
    errors, _ = run_both(kind, recipe, sequence_parallel, record_property)
    assert max(errors.values()) < TOLERANCE, errors
    # The products that are weft ops in bf16 ran through them with e4m3 operands (the column
    # layer without sequence parallelism multiplies locally, as bf16's torch.mm does).
    fp8_calls = [c[0] for c in world_of_one_with_fp8_ops.calls if c[1] == E4M3]
    expected = {"column": ["ag_gemm"] if sequence_parallel else [], "row": ["gemm_rs" if sequence_parallel else "gemm_ar"]}
    expected["mlp"] = expected["column"] + expected["row"]
    assert fp8_calls == expected[kind]


@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sp", "tp"])
@pytest.mark.parametrize("recipe", FP8_BACKWARD_RECIPES, ids=lambda r: r.scaling)
@pytest.mark.parametrize("kind", ["column", "row", "mlp"])
def test_fp8_backward_layers_match_the_recipe_in_plain_torch(world_of_one_with_fp8_ops, kind, recipe, sequence_parallel, record_property):
    """recipe.backward "fp8": the input gradients' products in FP8 (e5m2 gradients, the weight's
    transpose in e4m3), in weft's layers and in plain torch's recipe alike."""
    errors, _ = run_both(kind, recipe, sequence_parallel, record_property)
    assert max(errors.values()) < TOLERANCE, errors


def test_the_comparison_sees_the_fp8_backward(world_of_one_with_fp8_ops, record_property):
    """The FP8 backward's input gradient against the bf16 backward's recipe (e5m2: 2 mantissa bits):
    far beyond TOLERANCE, while the forward and the weight gradients (bf16 in both) agree."""
    fp8_backward = fp8.Float8Recipe("rowwise", "fp8")
    errors, _ = run_both("mlp", RECIPES[1], True, record_property, layer=layer_of("mlp", fp8_backward, True))
    assert errors["dx"] > 3 * TOLERANCE and errors["output"] < TOLERANCE, errors
    with pytest.raises(ValueError, match="backward must be one of"):
        fp8.Float8Recipe("rowwise", "e5m2")


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.scaling)
def test_the_comparison_sees_fp8s_error(world_of_one_with_fp8_ops, recipe, record_property):
    """The bf16 layer against the FP8 recipe's plain torch: far beyond TOLERANCE (the check above
    would catch products or gradients that skip the quantization)."""
    errors, _ = run_both("mlp", recipe, True, record_property, layer=layer_of("mlp", None, True))
    assert all(e > 3 * TOLERANCE for e in errors.values()), errors


def test_a_strategy_that_declines_fp8_gives_the_same_product_with_one_warning(world_of_one_with_fp8_ops, record_property):
    state = world_of_one_with_fp8_ops
    state.declining = {"chunked"}
    recipe = RECIPES[1]
    with pytest.warns(UserWarning, match=r"ag_gemm with strategy 'chunked' does not run this FP8 product .*declines e4m3"):
        errors, first = run_both("mlp", recipe, True, record_property, strategy="chunked", save_gathered_input=True)
    assert max(errors.values()) < TOLERANCE, errors
    calls = len(state.calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, and weft's op not asked again
        errors, again = run_both("mlp", recipe, True, record_property, strategy="chunked")
    assert max(errors.values()) < TOLERANCE and torch.equal(first, again)
    assert [c[0] for c in state.calls[calls:] if c[1] == E4M3] == [], state.calls[calls:]


def test_other_refusals_of_weft_s_op_are_not_taken_for_a_decline(world_of_one_with_fp8_ops, monkeypatch):
    monkeypatch.setattr(fp8, "scale_of", lambda amax, dtype=None: amax.double())  # a float64 scale: refused by the op
    layer = layer_of("row", RECIPES[0], True)
    with pytest.raises(ValueError, match="scale_a is torch.float64"):
        layer(varied(48, 128, seed=5))


def test_the_fp8_mlp_at_world_two_over_gloo_matches_the_recipe():
    """fp8_world_of_two.py in processes of its own: every recipe (bf16 and FP8 backward), sequence
    parallel (the gathered input kept or not) or not, a strategy that runs FP8 and one that declines
    it, on both ranks."""
    stdout = gloo_world.run_script("fp8_world_of_two.py")
    assert len(re.findall(r"rank \d [a-z]+/[a-z0-9]+ sp=", stdout)) == 2 * 4 * 3 * 2, stdout
