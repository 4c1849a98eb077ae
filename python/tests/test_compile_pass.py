"""weft.torch.compile's pattern matching on traced graphs (no GPU): functional collectives over a
fake process group of 4 ranks, traced by make_fx, rewritten by the pass; what it rewrites, what it
leaves and why. Whether the rewritten graph runs and matches eager is the GPU test's (test_torch.py)."""

import types

import pytest

torch = pytest.importorskip("torch")

try:
    import weft.torch  # noqa: F401
    from weft.torch import comm
    from weft.torch import compile as wcompile
except Exception as e:  # the native module without a usable libtorch
    pytest.skip(f"weft.torch does not import here: {e}", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

WORLD = 4


@pytest.fixture(scope="module")
def fake_group():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():  # a GPU run under torchrun: its group is real, and the other tests need it
        pytest.skip("torch.distributed is already initialised; the pattern tests trace over a fake group of their own")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def weft_spans(fake_group, monkeypatch):
    """weft's communicator over the fake group (the pass asks only its size and group)."""
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=WORLD, rank=0))
    monkeypatch.setitem(comm._state, "group", fake_group)
    return fake_group


def ops_in(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def bf16(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def test_the_three_patterns_of_a_sequence_parallel_mlp_become_weft_ops(weft_spans):
    group = weft_spans

    def mlp(x, w_up, w_down, w_out):
        h = torch.mm(funcol.all_gather_tensor(x, 0, group), w_up.t())  # column-parallel, sequence-parallel input
        z = funcol.reduce_scatter_tensor(torch.mm(torch.nn.functional.gelu(h), w_down.t()), "sum", 0, group)  # row-parallel
        return funcol.all_reduce(torch.mm(z, w_out.t()), "sum", group)  # row-parallel, replicated output

    gm = make_fx(mlp)(bf16(16, 64), bf16(128, 64), bf16(64, 128), bf16(32, 64))
    findings = wcompile.rewrite(gm.graph)
    gm.recompile()
    assert [(f.op, f.rewritten) for f in findings] == [("ag_gemm", True), ("gemm_rs", True), ("gemm_ar", True)], findings
    ops = ops_in(gm)
    assert [o for o in ops if o.startswith("weft.")] == ["weft.ag_gemm.default", "weft.gemm_rs.default", "weft.gemm_ar.default"], ops
    assert not [o for o in ops if "_c10d_functional" in o or o in ("aten.mm.default", "aten.t.default")], ops
    # The weft ops take the shard and the weight as the model holds them: no transposed copy.
    ag = next(n for n in gm.graph.nodes if str(n.target) == "weft.ag_gemm.default")
    assert [a.name for a in ag.args[:2]] == ["x_1", "w_up_1"] and ag.args[2] == 0
    assert tuple(ag.meta["val"].shape) == (16 * WORLD, 128)


def test_sequence_first_activations_are_followed_through_their_view(weft_spans):
    group = weft_spans

    def column(x, w):  # x [s/W, b, h] gathered along the sequence, flattened for the product
        gathered = funcol.all_gather_tensor(x, 0, group)
        return torch.mm(gathered.view(-1, 64), w.t()).view(-1, 2, 96)

    gm = make_fx(column)(bf16(8, 2, 64), bf16(96, 64))
    findings = wcompile.rewrite(gm.graph)
    assert [(f.op, f.rewritten) for f in findings] == [("ag_gemm", True)], findings
    ops = ops_in(gm)
    assert "weft.ag_gemm.default" in ops and not [o for o in ops if "_c10d_functional" in o], ops
    ag = next(n for n in gm.graph.nodes if str(n.target) == "weft.ag_gemm.default")
    assert str(ag.args[0].target) == "aten.reshape.default" and ag.args[0].args[1] == [-1, 64]


@pytest.mark.parametrize(
    "case, reason",
    [
        ("float32", "dtype torch.float32"),
        ("bias", "a bias (addmm)"),
        ("untransposed", "not given transposed"),
        ("gathered_read_twice", "another node also reads the gathered tensor"),
        ("max_reduction", "a 'max' reduction"),
        ("ragged_k", "multiples of 8"),
    ],
)
def test_near_matches_are_left_with_their_reason(weft_spans, case, reason):
    group = weft_spans
    dtype = torch.float32 if case == "float32" else torch.bfloat16
    k = 60 if case == "ragged_k" else 64
    x, w = torch.randn(16, k, dtype=dtype), torch.randn(128, k, dtype=dtype)

    def graph(x, w):
        gathered = funcol.all_gather_tensor(x, 0, group)
        if case == "bias":
            return torch.addmm(torch.ones(128, dtype=dtype), gathered, w.t())
        if case == "untransposed":
            return torch.mm(gathered, w.t().contiguous())
        if case == "gathered_read_twice":
            return torch.mm(gathered, w.t()), gathered.sum()
        if case == "max_reduction":
            return funcol.reduce_scatter_tensor(torch.mm(x, w.t()), "max", 0, group)
        return torch.mm(gathered, w.t())

    gm = make_fx(graph)(x, w)
    before = ops_in(gm)
    findings = wcompile.rewrite(gm.graph)
    assert findings and not any(f.rewritten for f in findings), findings
    assert any(reason in f.reason for f in findings), [f.reason for f in findings]
    assert ops_in(gm) == before, "a near-match leaves the graph as it was"


@pytest.mark.parametrize("transpose", ["t", "permute", "transpose"])
def test_every_spelling_of_the_transposed_weight_is_taken(weft_spans, transpose):
    group = weft_spans
    spell = {"t": lambda w: w.t(), "permute": lambda w: w.permute(1, 0), "transpose": lambda w: w.transpose(0, 1)}[transpose]

    def graph(a, w):
        return funcol.all_reduce(torch.mm(a, spell(w)), "sum", group)

    gm = make_fx(graph)(bf16(16, 64), bf16(32, 64))
    findings = wcompile.rewrite(gm.graph)
    assert [(f.op, f.rewritten) for f in findings] == [("gemm_ar", True)], findings


def test_a_collective_over_another_group_is_left(weft_spans):
    other = dist.new_group(list(range(WORLD)))
    assert other.group_name != weft_spans.group_name

    def graph(x, w):
        return torch.mm(funcol.all_gather_tensor(x, 0, other), w.t())

    gm = make_fx(graph)(bf16(16, 64), bf16(128, 64))
    findings = wcompile.rewrite(gm.graph)
    assert len(findings) == 1 and not findings[0].rewritten, findings
    assert f"over group '{other.group_name}'; weft's communicator spans '{weft_spans.group_name}'" in findings[0].reason


def test_nothing_is_rewritten_before_weft_is_initialised_or_over_another_group(fake_group, monkeypatch):
    def graph(x, w):
        return torch.mm(funcol.all_gather_tensor(x, 0, fake_group), w.t())

    monkeypatch.setitem(comm._state, "comm", None)
    gm = make_fx(graph)(bf16(16, 64), bf16(128, 64))
    findings = wcompile.rewrite(gm.graph)
    assert [(f.rewritten, f.reason) for f in findings] == [(False, "weft.torch.init() has not been called")]
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=2, rank=0))
    monkeypatch.setitem(comm._state, "group", fake_group)
    gm = make_fx(graph)(bf16(16, 64), bf16(128, 64))
    findings = wcompile.rewrite(gm.graph)
    assert findings and "weft's communicator has 2" in findings[0].reason, findings


def test_enable_installs_the_pass_and_disable_puts_back_what_was_there(monkeypatch):
    config = torch._inductor.config
    monkeypatch.setattr(config, "post_grad_custom_pre_pass", None)
    wcompile.enable()
    installed = config.post_grad_custom_pre_pass
    assert isinstance(installed, torch._inductor.custom_graph_pass.CustomGraphPass) and installed.uuid()
    wcompile.disable()
    assert config.post_grad_custom_pre_pass is None
