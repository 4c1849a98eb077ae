"""weft.torch.compile's pattern matching on traced graphs (no GPU): functional collectives over a
fake process group of 4 ranks, traced by make_fx, rewritten by the pass; what it rewrites, what it
leaves and why. The rewritten graphs are also run on the CPU as rank 0 of four ranks holding the
same inputs (collectives and weft's ops by their definitions, weft's operands checked for the
layouts its kernels take) and compared with the graph as traced, and weft's fake kernels are checked
to agree with the shapes and strides the pass records. Whether the compiled model runs on GPUs and
matches eager is the GPU test's (test_torch.py)."""

import contextlib
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


def weft_nodes(gm):
    return [n for n in gm.graph.nodes if str(n.target).startswith("weft.")]


def check_operands(a, b):
    """What weft's kernels accept (python/src/torch_ops.cpp): A row-major contiguous; B [n, k]
    with strides (k, 1) or (1, n), never anything else."""
    n, k = b.shape
    assert a.dim() == 2 and a.is_contiguous(), (a.shape, a.stride())
    assert b.stride() in ((k, 1), (1, n)), f"B {tuple(b.shape)} with strides {b.stride()}: weft's kernels refuse it"


def _gathered(a):
    return torch.cat([a] * WORLD)


def _weft_op(product):
    def run(a, b, strategy=0):
        check_operands(a, b)
        return product(a, b)

    return run


_c10d = torch.ops._c10d_functional
_AS_RANK_0 = {
    _c10d.all_gather_into_tensor.default: lambda x, size, group: torch.cat([x] * size),
    _c10d.reduce_scatter_tensor.default: lambda x, op, size, group: x.chunk(size)[0] * (size if op == "sum" else 1),
    _c10d.all_reduce.default: lambda x, op, group: x * (WORLD if op == "sum" else 1),
    _c10d.wait_tensor.default: lambda x: x,
}


def _weft_ops():
    w = torch.ops.weft
    return {
        w.ag_gemm.default: _weft_op(lambda a, b: torch.mm(_gathered(a), b.t())),
        w.ag_gemm_gathered.default: _weft_op(lambda a, b: (torch.mm(_gathered(a), b.t()), _gathered(a))),
        w.gemm_rs.default: _weft_op(lambda a, b: torch.mm(a, b.t()).chunk(WORLD)[0] * WORLD),
        w.gemm_ar.default: _weft_op(lambda a, b: torch.mm(a, b.t()) * WORLD),
    }


class AsRank0(torch.fx.Interpreter):
    """Runs a graph as rank 0 of WORLD ranks that all hold its inputs: the collectives and weft's ops
    by their definitions (ops.py: the sequential equivalents), weft's operands checked as its
    kernels check them."""

    def call_function(self, target, args, kwargs):
        emulated = {**_AS_RANK_0, **_weft_ops()}.get(target)
        return emulated(*args, **kwargs) if emulated else super().call_function(target, args, kwargs)


def rewritten_computes_as_traced(fn, *inputs):
    """Traces fn, rewrites the graph; checks the rewritten graph against the traced one (run as
    rank 0 of identical ranks) and weft's fake kernels against the metadata the pass put in.
    Returns (the rewritten module, the findings)."""
    traced = make_fx(fn)(*inputs)
    gm = make_fx(fn)(*inputs)
    findings = wcompile.rewrite(gm.graph)
    gm.recompile()
    expected, got = AsRank0(traced).run(*inputs), AsRank0(gm).run(*inputs)
    torch.testing.assert_close(got, expected)
    recorded = {n.name: n.meta["val"] for n in weft_nodes(gm)}
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    FakeTensorProp(gm).propagate(*inputs)
    for node in weft_nodes(gm):
        for fake, meta in zip(*(v if isinstance(v, tuple) else (v,) for v in (node.meta["val"], recorded[node.name]))):
            assert (fake.shape, fake.stride()) == (meta.shape, meta.stride()), node
    return gm, findings


def bf16(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def test_the_three_patterns_of_a_sequence_parallel_mlp_become_weft_ops(weft_spans):
    group = weft_spans

    def mlp(x, w_up, w_down, w_out):
        h = torch.mm(funcol.all_gather_tensor(x, 0, group), w_up.t())  # column-parallel, sequence-parallel input
        z = funcol.reduce_scatter_tensor(torch.mm(torch.nn.functional.gelu(h), w_down.t()), "sum", 0, group)  # row-parallel
        return funcol.all_reduce(torch.mm(z, w_out.t()), "sum", group)  # row-parallel, replicated output

    gm, findings = rewritten_computes_as_traced(mlp, bf16(16, 64), bf16(128, 64), bf16(64, 128), bf16(32, 64))
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

    gm, findings = rewritten_computes_as_traced(column, bf16(8, 2, 64), bf16(96, 64))
    assert [(f.op, f.rewritten) for f in findings] == [("ag_gemm", True)], findings
    ops = ops_in(gm)
    assert "weft.ag_gemm.default" in ops and not [o for o in ops if "_c10d_functional" in o], ops
    ag = next(n for n in gm.graph.nodes if str(n.target) == "weft.ag_gemm.default")
    assert str(ag.args[0].target) == "aten.reshape.default" and ag.args[0].args[1] == [-1, 64]


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_a_weight_not_given_transposed_goes_in_as_its_kn_view(weft_spans, op):
    """mm(x, W) with W a plain [k, n] tensor (a backward's dy @ W, or a weight kept [in, out]): the
    op takes B = W.t(), a view with strides (1, n), and nothing is copied."""
    group = weft_spans

    def graph(x, w):  # w [k, n], as it lies
        if op == "ag_gemm":
            return torch.mm(funcol.all_gather_tensor(x, 0, group), w)
        if op == "gemm_rs":
            return funcol.reduce_scatter_tensor(torch.mm(x, w), "sum", 0, group)
        return funcol.all_reduce(torch.mm(x, w), "sum", group)

    gm, findings = rewritten_computes_as_traced(graph, bf16(16, 64), bf16(64, 96))
    assert [(f.op, f.rewritten) for f in findings] == [(op, True)], findings
    assert findings[0].note.startswith("B kn: w_1.t(), a view"), findings[0].note
    (node,) = weft_nodes(gm)
    b = node.args[1]
    assert str(b.target) == "aten.permute.default" and b.args == (node.graph.find_nodes(op="placeholder")[1], [1, 0])
    assert tuple(b.meta["val"].shape) == (96, 64) and b.meta["val"].stride() == (1, 96)
    assert not [o for o in ops_in(gm) if "_c10d_functional" in o or o in ("aten.mm.default", "aten.clone.default")], ops_in(gm)


@pytest.mark.parametrize("reader", ["sum", "unflattened", "before_the_weight"])
def test_a_gathered_tensor_read_elsewhere_comes_back_from_ag_gemm_gathered(weft_spans, reader):
    """The gathered tensor has another reader (saved for a weight gradient, or read by a later node):
    ag_gemm_gathered gathers it once and hands it back to those readers; no all-gather is left."""
    group = weft_spans

    def graph(x, w):
        gathered = funcol.all_gather_tensor(x, 0, group)
        if reader == "unflattened":  # x [s/W, b, h]: the product reads a flattening view, another node the 3-D tensor
            return torch.mm(gathered.view(-1, 64), w.t()), gathered * 2
        if reader == "before_the_weight":  # the other reader comes first, the weight is made after it
            total = gathered.sum()
            return torch.mm(gathered, (w * 2).t()), total
        return torch.mm(gathered, w.t()), gathered.sum()

    x = bf16(8, 2, 64) if reader == "unflattened" else bf16(16, 64)
    gm, findings = rewritten_computes_as_traced(graph, x, bf16(96, 64))
    assert [(f.op, f.rewritten) for f in findings] == [("ag_gemm_gathered", True)], findings
    (node,) = weft_nodes(gm)
    assert str(node.target) == "weft.ag_gemm_gathered.default", node.target
    gathered = next(u for u in node.users if u.args[1] == 1)
    readers = list(gathered.users)
    if reader == "unflattened":
        assert [str(r.target) for r in readers] == ["aten.view.default"] and readers[0].args[1] == [8 * WORLD, 2, 64]
        readers = list(readers[0].users)
    assert [str(r.target) for r in readers] == ["aten.mul.Tensor" if reader == "unflattened" else "aten.sum.default"]
    assert f"goes to {readers[0].name}" in findings[0].note, findings[0].note
    assert not [o for o in ops_in(gm) if "_c10d_functional" in o or o == "aten.mm.default"], ops_in(gm)


def test_products_sharing_one_gather_get_one_weft_op_and_the_rest_read_what_it_gathered(weft_spans):
    """q and k projections of one gathered input (one all-gather, two products): the first becomes
    ag_gemm_gathered, the second multiplies the gathered input it hands back, and the log says so."""
    group = weft_spans

    def graph(x, wq, wk):
        gathered = funcol.all_gather_tensor(x, 0, group)
        return torch.mm(gathered, wq.t()), torch.mm(gathered, wk.t())

    gm, findings = rewritten_computes_as_traced(graph, bf16(16, 64), bf16(96, 64), bf16(32, 64))
    assert [(f.op, f.rewritten) for f in findings] == [("ag_gemm_gathered", True), ("ag_gemm", False)], findings
    assert "it reads the gathered input ag_gemm_gathered_default hands back" in findings[1].reason, findings[1]
    (node,) = weft_nodes(gm)
    gathered = next(u for u in node.users if u.args[1] == 1)
    assert [str(u.target) for u in gathered.users] == ["aten.mm.default"], list(gathered.users)
    assert not [o for o in ops_in(gm) if "_c10d_functional" in o], ops_in(gm)


def test_a_sequence_parallel_mlps_training_step_has_every_collective_in_a_weft_op(weft_spans):
    """Forward and backward of a sequence-parallel MLP in one graph: forward all-gather + up
    (its gathered input saved for up's weight gradient: ag_gemm_gathered), down + reduce-scatter
    (gemm_rs); backward all-gather of dy + dy @ W_down (W_down's kn view; the gathered dy also feeds
    down's weight gradient: ag_gemm_gathered) and dh @ W_up + reduce-scatter (gemm_rs, kn)."""
    group = weft_spans

    def step(x, w_up, w_down, dy):
        x, w_up, w_down = (t.detach().requires_grad_() for t in (x, w_up, w_down))
        h = torch.mm(funcol.all_gather_tensor_autograd(x, 0, group), w_up.t())
        y = funcol.reduce_scatter_tensor_autograd(torch.mm(torch.nn.functional.gelu(h), w_down.t()), "sum", 0, group)
        return (y, *torch.autograd.grad(y, (x, w_up, w_down), dy))

    gm, findings = rewritten_computes_as_traced(step, bf16(16, 64), bf16(128, 64), bf16(64, 128), bf16(16, 64))
    assert sorted((f.op, f.rewritten) for f in findings) == [("ag_gemm_gathered", True)] * 2 + [("gemm_rs", True)] * 2, findings
    assert sorted(f.note.split(":")[0] for f in findings) == ["B kn", "B kn", "B nk", "B nk"], [f.note for f in findings]
    assert not [o for o in ops_in(gm) if "_c10d_functional" in o], ops_in(gm)
    for node in weft_nodes(gm):
        if str(node.target) == "weft.ag_gemm_gathered.default":  # each gathered tensor feeds a weight gradient
            gathered = next(u for u in node.users if u.args[1] == 1)
            assert gathered.users, node


@pytest.mark.parametrize(
    "case, reason",
    [
        ("float32", "dtype torch.float32"),
        ("bias", "a bias (addmm)"),
        ("strided_weight", "B [128, 64] (the product's right operand, transposed) has strides (1, 256)"),
        ("gathered_on_the_right", "the product's right operand"),
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
        if case == "strided_weight":  # the left half of a [k, 256] weight: B, its .t(), is neither layout
            return torch.mm(gathered, torch.cat([w.t(), w.t()], 1)[:, :128])
        if case == "gathered_on_the_right":  # [128, 64] @ [64, 64]: a weight gradient's shape of product
            return torch.mm(w, gathered)
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


def test_enable_installs_the_pass_and_disable_puts_back_what_was_there():
    config = torch._inductor.config
    with config.patch(post_grad_custom_pre_pass=None):  # (monkeypatch's undo hides a config entry)
        wcompile.enable()
        installed = config.post_grad_custom_pre_pass
        assert isinstance(installed, torch._inductor.custom_graph_pass.CustomGraphPass) and installed.uuid()
        wcompile.disable()
        assert config.post_grad_custom_pre_pass is None


@pytest.fixture
def weft_ops_on_the_cpu():
    """weft's ops as CPU kernels by their definitions (rank 0 of identical ranks, operands checked as
    the kernels check them), for graphs Inductor compiles here; the layouts B arrived in listed."""
    lib = torch.library.Library("weft", "IMPL")
    received = []
    for op, run in _weft_ops().items():
        def kernel(a, b, strategy=0, run=run, name=op.__name__.split(".")[0]):
            received.append((name, "kn" if b.stride() == (1, b.shape[0]) else "nk"))
            return run(a, b)

        lib.impl(op.__name__.split(".")[0], kernel, "CPU")
    torch._dynamo.reset()
    yield received
    torch._dynamo.reset()
    lib._destroy()


@contextlib.contextmanager
def the_pass_compiling_afresh():
    """The pass on, and Inductor compiling every graph afresh: a cached graph runs no post-grad pass
    (so it would report nothing)."""
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        wcompile.enable()
        try:
            yield
        finally:
            wcompile.disable()


def test_inductor_hands_weft_a_row_major_a_where_the_graph_has_another_layout(weft_spans, weft_ops_on_the_cpu):
    """The product's A is a transposed view (strides (1, rows)), which weft's kernels refuse: the op
    node asks Inductor for A row-major (eager_input_vals), so Inductor lays it out so, and the result
    equals the graph's (rank 0 of identical ranks)."""
    group = weft_spans

    def graph(a_t, w):
        return funcol.all_reduce(torch.mm(a_t.t(), w.t()), "sum", group)

    a_t, w = bf16(64, 16), bf16(32, 64)
    with the_pass_compiling_afresh():
        got = torch.compile(graph, fullgraph=True)(a_t, w)
    assert [(f.op, f.rewritten) for f in wcompile.report()] == [("gemm_ar", True)], wcompile.report()
    torch.testing.assert_close(got, torch.mm(a_t.t(), w.t()) * WORLD)


def test_inductor_compiles_a_rewritten_training_step_that_matches_eager(weft_spans, weft_ops_on_the_cpu):
    """torch.compile (Inductor, CPU) of a sequence-parallel MLP's forward and backward with the pass
    on: every collective goes into a weft op, B reaches the ops in the layouts the pass chose (the
    backward's as W.t() views, not copies), and output and gradients equal the eager step's, run as
    rank 0 of identical ranks (eager: the functional collectives by their definitions)."""
    group = weft_spans

    def step(x, w_up, w_down):
        h = torch.mm(funcol.all_gather_tensor_autograd(x, 0, group), w_up.t())
        return funcol.reduce_scatter_tensor_autograd(torch.mm(torch.nn.functional.gelu(h), w_down.t()), "sum", 0, group)

    inputs = [bf16(16, 64), bf16(128, 64), bf16(64, 128)]
    dy = bf16(16, 64)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in inputs]
        y = fn(*leaves)
        y.backward(dy)
        return [y.detach(), *(t.grad for t in leaves)]

    collectives = torch.library.Library("_c10d_functional", "IMPL")
    try:
        for name, emulated in [("all_gather_into_tensor", _AS_RANK_0[_c10d.all_gather_into_tensor.default]),
                               ("reduce_scatter_tensor", _AS_RANK_0[_c10d.reduce_scatter_tensor.default])]:
            collectives.impl(name, emulated, "CPU")
        eager = run(step)
    finally:
        collectives._destroy()
    with the_pass_compiling_afresh():
        compiled = run(torch.compile(step, fullgraph=True))
    assert sorted((f.op, f.rewritten) for f in wcompile.report()) == [("ag_gemm_gathered", True)] * 2 + [("gemm_rs", True)] * 2, wcompile.report()
    assert sorted(weft_ops_on_the_cpu) == [("ag_gemm_gathered", "kn"), ("ag_gemm_gathered", "nk"), ("gemm_rs", "kn"), ("gemm_rs", "nk")]
    for got, expected in zip(compiled, eager):
        torch.testing.assert_close(got, expected)
