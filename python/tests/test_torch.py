"""weft through PyTorch on the GPU (world 1 here; the multi-GPU runs use the same tests under
torchrun): every op against torch, argument checks before any launch, torch.compile(fullgraph=True),
a captured torch.cuda.graph replayed 100 times with new inputs, the tensor-parallel layers' forward
and backward against plain torch, and weft.benchmark's table."""

import json
import os
import subprocess
import sys
import zlib

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
import weft  # noqa: E402
import weft.torch as wt  # noqa: E402
from weft.torch import plain  # noqa: E402

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-2  # bf16 results against torch's, where a test compares weft with torch as a whole


@pytest.fixture(scope="module", autouse=True)
def communicator(weft_on_this_gpu):
    return weft_on_this_gpu


def rel(got, want):
    """The relative error, the largest over the ranks (inf for NaN): every rank asserts on the same value."""
    got, want = got.float(), want.float()
    assert want.abs().max() > 0, "the expected result is all zero"
    error = float("inf") if torch.isnan(got).any() else ((got - want).norm() / want.norm()).item()
    return checking.slowest(error)


def bf16(*shape, seed):
    return checking.inputs(*shape, seed=seed)


def everyone(x):
    """Every rank's x, stacked by rank."""
    return wt.layers.all_gather_rows(x)


def expected(op, a, b, routing=None):
    """(the op in float64, its per-element scale, roundings) from every rank's inputs (checking.py)."""
    world, rank = wt.world_size(), wt.communicator().rank
    a_all, b_all = everyone(a).chunk(world), everyone(b).chunk(world)
    if op == "ag_gemm":
        return (*checking.reference(everyone(a), b), 1)
    if op in ("gemm_rs", "gemm_ar"):
        # sum_r A_r B_r^T: every rank's A and B, products added.
        parts = [checking.reference(x, y) for x, y in zip(a_all, b_all)]
        total, scale = sum(p[0] for p in parts), sum(p[1] for p in parts)
        if op == "gemm_rs":
            total, scale = total.chunk(world)[rank], scale.chunk(world)[rank]
        return total, scale, world + 1
    rows, scales = [], []
    for source in range(world):
        mine = (routing[source] == rank).cpu()
        if op == "gemm_a2a":
            want, scale = checking.reference(a_all[source], b_all[source])
            rows.append(want[mine]), scales.append(scale[mine])
        else:
            want, scale = checking.reference(a_all[source][mine.to(a.device)], b)
            rows.append(want), scales.append(scale)
    return torch.cat(rows), torch.cat(scales), 1


def cases():
    # The torch ops (weft.OPS); the MoE ops are plans only so far (weft.PLAN_ONLY_OPS: no per-call routing).
    out = []
    for name, _, _, ops in weft.strategies():
        for op in ops:
            if op in weft.OPS:
                out.append((op, name))
    for op in weft.OPS:
        out.append((op, "default"))
    return out


def case_seed(*words):
    """Inputs of their own for every case (and rank): no case can pass on an earlier case's result."""
    return zlib.crc32(" ".join(map(str, words)).encode()) % (1 << 30)


@pytest.mark.parametrize("op, strategy", cases())
def test_every_op_and_strategy_equals_the_float64_reference(op, strategy):
    world, rank = wt.world_size(), wt.communicator().rank
    rows = 96 * world if op == "gemm_rs" else 200  # ragged against 128-row tiles
    seed = case_seed(op, strategy, rank)
    a, b = bf16(rows, 136, seed=seed), bf16(264, 136, seed=seed + 1)
    routing = None
    if op in ("gemm_a2a", "a2a_gemm"):
        routing = torch.randint(0, world, (world, rows), generator=torch.Generator().manual_seed(case_seed(op, strategy)), dtype=torch.int32)
    want, scale, terms = expected(op, a, b, routing)
    for call in range(2):  # the second call may replay a captured graph: checked as well
        if routing is not None:
            got = getattr(wt.ops, op)(a, b, routing, strategy)
        else:
            got = getattr(wt.ops, op)(a, b, strategy, out=checking.poisoned(tuple(want.shape), a))
        checking.assert_close(got, want, scale, terms, f"{op} {strategy} call {call}")


@pytest.mark.parametrize("op, strategy", [c for c in cases() if c[0] in ("ag_gemm", "gemm_rs", "gemm_ar")])
def test_b_given_as_a_transposed_view_is_read_where_it_lies(op, strategy):
    # b = w.t() of a contiguous w [k, n] (a weight's input gradient): the same product as with a
    # contiguous copy of it, and nothing copied (torch's allocator sees only the result).
    world, rank = wt.world_size(), wt.communicator().rank
    rows = 96 * world if op == "gemm_rs" else 200
    seed = case_seed("kn", op, strategy, rank)
    a, w = bf16(rows, 264, seed=seed), bf16(264, 136, seed=seed + 1)  # b = w.t(): [136, 264], strides (1, 136)
    b = w.t()
    assert b.stride() == (1, 136)
    want, scale, terms = expected(op, a, b.contiguous())
    getattr(wt.ops, op)(a, b, strategy)  # plans and lowers (weft's own memory, not torch's)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    got = getattr(wt.ops, op)(a, b, strategy)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before <= got.numel() * got.element_size() + 512, "b was copied"
    checking.assert_close(got, want, scale, terms, f"{op} {strategy} with b = w.t()")


@pytest.mark.parametrize("strategy", [s for op, s in cases() if op == "ag_gemm"])
def test_ag_gemm_hands_back_the_input_it_gathered(strategy):
    world, rank = wt.world_size(), wt.communicator().rank
    seed = case_seed("return_a", strategy, rank)
    a, b = bf16(200, 136, seed=seed), bf16(264, 136, seed=seed + 1)
    for call in range(2):  # the second call may replay a captured graph
        got, gathered = wt.ops.ag_gemm(a, b, strategy, return_a=True)
        assert torch.equal(gathered, everyone(a)), f"{strategy} call {call}: the gathered A differs from every rank's A"
        checking.assert_close(got, *expected("ag_gemm", a, b), what=f"ag_gemm {strategy} return_a call {call}")
    with pytest.raises(ValueError, match="out="):
        wt.ops.ag_gemm(a, b, strategy, out=checking.poisoned((world * 200, 264), a), return_a=True)


def test_a_call_that_writes_nothing_fails_the_check():
    # The check itself: a poisoned output left as it is, and a result with one wrong 8x8 block, fail.
    a, b = bf16(200, 136, seed=3), bf16(264, 136, seed=4)
    want, scale = checking.reference(a, b)
    with pytest.raises(AssertionError, match="NaN"):
        checking.assert_close(checking.poisoned(tuple(want.shape), a), want, scale)
    got = wt.ops.gemm_ar(a, b) if wt.world_size() == 1 else want.to(torch.bfloat16)
    checking.assert_close(got, want, scale)
    wrong = got.clone()
    wrong[64:72, 128:136] += 0.25
    with pytest.raises(AssertionError, match="beyond the bound"):
        checking.assert_close(wrong, want, scale)


def test_ops_at_world_one_are_the_gemm_alone():
    if wt.world_size() > 1:
        pytest.skip("world 1 only")
    a, b = bf16(256, 128, seed=5), bf16(384, 128, seed=6)
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        for strategy in ("default", "fused", "decomposed", "sequential"):
            names = {name for name, _, _, ops in weft.strategies() if op in ops}
            if strategy != "default" and strategy not in names:
                continue
            plan = weft.Op(wt.communicator(), op, 384, 128, 256, strategy).describe_plan(256)
            assert "gemm (world 1: nothing to communicate)" in plan, plan
            for word in ("copy", "all_gather", "reduce", "symmetric", "signal"):
                assert word not in plan.lower(), (op, strategy, word, plan)


def test_a_producer_writes_a_in_place_and_nothing_is_copied_in(monkeypatch):
    world, rank = wt.world_size(), wt.communicator().rank
    n, k, rows = 200, 96, 64  # a shape family no other test makes
    if world == 1:
        assert wt.ops.symmetric_input("ag_gemm", (n, k), rows, "decomposed") is None, "world 1: the GEMM alone reads the caller's A"
        # The strategy's own plan on one GPU, to see its copy-in and the in-place path.
        monkeypatch.setenv("WEFT_KEEP_STRATEGY_AT_WORLD_ONE", "1")
        n = 208
    x = wt.ops.symmetric_input("ag_gemm", (n, k), rows, "decomposed")
    assert x is not None and tuple(x.shape) == (rows, k) and x.dtype == torch.bfloat16 and x.is_cuda
    b = bf16(n, k, seed=case_seed("in place b", rank))
    produced_from, weight = bf16(rows, 48, seed=case_seed("in place x", rank)), bf16(k, 48, seed=case_seed("in place w", rank))
    for call in range(2):
        torch.mm(produced_from, weight.t(), out=x)  # the producer writes A where the op reads it
        a = x.clone()
        got = wt.ops.ag_gemm(x, b, "decomposed", out=checking.poisoned((world * rows, n), x))
        assert wt.ops.copies_in_last_call("ag_gemm", (n, k), rows, "decomposed") == 0, "in place: nothing copied in"
        checking.assert_close(got, *expected("ag_gemm", a, b), what=f"in place, call {call}")
        produced_from = produced_from.roll(1, 0)
    # The same op from an ordinary tensor copies A in once.
    got = wt.ops.ag_gemm(a, b, "decomposed")
    assert wt.ops.copies_in_last_call("ag_gemm", (n, k), rows, "decomposed") == 1
    checking.assert_close(got, *expected("ag_gemm", a, b), what="copied in")


def test_wrong_inputs_are_rejected_before_any_launch():
    a, b = bf16(128, 128, seed=1), bf16(256, 128, seed=2)
    torch.cuda.synchronize()
    bad = [
        (a.half(), b, "bfloat16"),
        (a.cpu(), b, "not on cuda"),
        (a, bf16(256, 256, seed=4)[:, ::2], "contiguous"),  # neither row-major nor a transposed row-major
        (a.view(-1)[1:1 + 127 * 128].view(127, 128), b, "16-byte"),
        (a, bf16(256, 64, seed=3), "k="),
        (a.unsqueeze(0), b, "2-D"),
    ]
    for x, y, words in bad:
        with pytest.raises(ValueError, match=words):
            torch.ops.weft.gemm_ar(x, y)
    with pytest.raises(ValueError, match="routing"):
        torch.ops.weft.gemm_a2a(a, b, torch.zeros((wt.world_size(), 5), dtype=torch.int32))
    with pytest.raises(ValueError, match="out must be"):
        torch.ops.weft.gemm_ar_into(a, b, torch.empty((64, 256), dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="strategy id"):
        torch.ops.weft.gemm_ar(a, b, 10_000)
    with pytest.raises(ValueError, match="unknown strategy"):
        wt.ops.gemm_ar(a, b, "nonsense")
    assert torch.cuda.current_stream().query(), "nothing was launched"


def test_a_model_compiles_fullgraph_and_equals_eager():
    world = wt.world_size()
    x, w1, w2 = bf16(128, 512, seed=11), bf16(1024 // world, 512, seed=12), bf16(512, 1024 // world, seed=13)

    def step(x, w1, w2):
        h = torch.nn.functional.gelu(torch.ops.weft.ag_gemm(x, w1))
        y = torch.ops.weft.gemm_rs(h, w2)
        return torch.ops.weft.gemm_ar(y, w1) * 0.5

    eager = step(x, w1, w2)
    # Eager against the float64 references, stage by stage (each from the previous stage's bf16 result),
    # so that compiled-vs-eager compares with a checked result, not weft with weft alone.
    h = torch.ops.weft.ag_gemm(x, w1)
    checking.assert_close(h, *expected("ag_gemm", x, w1), what="eager ag_gemm")
    g = torch.nn.functional.gelu(h)
    y = torch.ops.weft.gemm_rs(g, w2)
    checking.assert_close(y, *expected("gemm_rs", g, w2), what="eager gemm_rs")
    z = torch.ops.weft.gemm_ar(y, w1)
    checking.assert_close(z, *expected("gemm_ar", y, w1), what="eager gemm_ar")
    assert rel(eager, z * 0.5) < 1e-3  # the same calls again
    compiled = torch.compile(step, fullgraph=True)(x, w1, w2)
    assert compiled.shape == eager.shape
    assert rel(compiled, eager) < TOLERANCE


def test_a_captured_graph_replays_100_times_with_new_inputs():
    a, b = bf16(64, 128, seed=21), bf16(256, 128, seed=22)
    b_t = b.t().contiguous()  # [128, 256]: B of the second op
    # torch.cuda.graph's warm-up: eager calls on a side stream make weft plan and lower these shapes.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.ops.weft.gemm_rs(torch.ops.weft.ag_gemm(a, b), b_t)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gathered = torch.ops.weft.ag_gemm(a, b)  # [W*64, 256]
        out = torch.ops.weft.gemm_rs(gathered, b_t)  # [64, 128]
    for i in range(100):
        a.copy_(bf16(64, 128, seed=1000 + i + 7 * wt.communicator().rank))
        b.copy_(bf16(256, 128, seed=5000 + i + 7 * wt.communicator().rank))
        b_t.copy_(b.t())
        graph.replay()
        torch.cuda.synchronize()
        wt.check_errors()
        checking.assert_close(gathered, *expected("ag_gemm", a, b), what=f"ag_gemm replay {i}")
        checking.assert_close(out, *expected("gemm_rs", gathered, b_t), what=f"gemm_rs replay {i}")


@pytest.mark.parametrize("sequence_parallel, save_gathered_input", [(True, False), (True, True), (False, False)])
def test_the_mlp_layer_matches_plain_torch_forward_and_backward(sequence_parallel, save_gathered_input):
    world = wt.world_size()
    torch.manual_seed(5)
    layer = wt.TensorParallelMLP(512, 1024, sequence_parallel=sequence_parallel, save_gathered_input=save_gathered_input)
    rows = 128 if sequence_parallel else 128 * world
    x = bf16(rows, 512, seed=31 + (wt.communicator().rank if sequence_parallel else 0))
    dz = bf16(rows, 512, seed=41 + (wt.communicator().rank if sequence_parallel else 0))
    xw = x.clone().requires_grad_()
    z = layer(xw)
    z.backward(dz)
    xp, up, down = x.clone().requires_grad_(), layer.up.weight.detach().clone().requires_grad_(), layer.down.weight.detach().clone().requires_grad_()
    zp = plain.mlp(xp, up, down, sequence_parallel)
    zp.backward(dz)
    assert rel(z, zp) < TOLERANCE
    assert rel(xw.grad, xp.grad) < TOLERANCE
    assert rel(layer.up.weight.grad, up.grad) < TOLERANCE
    assert rel(layer.down.weight.grad, down.grad) < TOLERANCE


def test_the_benchmark_runs_and_writes_its_table(tmp_path):
    if wt.world_size() > 1:
        pytest.skip("run by hand under torchrun at world > 1")
    suite = {"name": "tiny", "description": "a pipeline check", "rows": [
        {"name": "AG", "op": "ag_gemm", "m": 512, "n": 1024, "k": 512},
        {"name": "RS", "op": "gemm_rs", "m": 512, "n": 512, "k": 1024},
        {"name": "AR", "op": "gemm_ar", "m": 512, "n": 512, "k": 1024},
    ]}
    (tmp_path / "tiny.json").write_text(json.dumps(suite))
    csv_path = tmp_path / "out.csv"
    done = subprocess.run([sys.executable, "-m", "weft.benchmark", "--suite", str(tmp_path / "tiny.json"), "--iterations", "3",
                           "--warmup", "1", "--csv", str(csv_path), "--mlp-hidden", "512", "--mlp-ffn", "1024", "--mlp-tokens", "256"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    text = csv_path.read_text()
    for variant in ("torch", "weft:default", "weft:sequential", "weft MLP fwd+bwd", "torch MLP fwd+bwd"):
        assert variant in text, text
    assert "speedup" in done.stdout


def test_the_benchmark_times_the_moe_ops_against_plain_torch(tmp_path):
    # MoE rows of a suite: weft's ag_moe / moe_rs (each strategy, default) against plain torch's
    # loop over experts and torch._grouped_mm on the same routing, each verified before it is timed.
    if wt.world_size() > 1:
        pytest.skip("run by hand under torchrun at world > 1")
    suite = {"name": "tiny_moe", "description": "a pipeline check", "rows": [
        {"name": "MoE AG", "op": "ag_moe", "m": 256, "n": 256, "k": 512, "experts": 8, "topk": 2},
        {"name": "MoE RS", "op": "moe_rs", "m": 256, "n": 512, "k": 256, "experts": 8, "topk": 2},
    ]}
    (tmp_path / "tiny_moe.json").write_text(json.dumps(suite))
    csv_path = tmp_path / "out.csv"
    done = subprocess.run([sys.executable, "-m", "weft.benchmark", "--suite", str(tmp_path / "tiny_moe.json"), "--iterations", "3",
                           "--warmup", "1", "--csv", str(csv_path), "--no-mlp"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(__import__("csv").DictReader(csv_path.open()))
    for op in ("ag_moe", "moe_rs"):
        variants = {r["variant"] for r in rows if r["op"] == op}
        want = {"torch", "weft:sequential", "weft:tilelink", "weft:default", "weft:default:ids", "weft:default:table"}
        want |= {"torch:grouped_mm"} if hasattr(torch, "_grouped_mm") else set()
        assert want <= variants, rows
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["relative_error"]) < 2e-2, r
        # The table says which variants make the host wait inside PyTorch; weft's calls never do,
        # bar the one that gathers each call's router ids to the host for the table path.
        if r["variant"].startswith("weft:"):
            assert ("synchronises the host" in r["note"]) == (r["variant"] == "weft:default:table"), r


def test_the_model_step_benchmark_verifies_and_times_both_variants(tmp_path):
    if wt.world_size() > 1:
        pytest.skip("run by hand under torchrun at world > 1")
    csv_path = tmp_path / "model.csv"
    done = subprocess.run([sys.executable, "-m", "weft.benchmark", "--model", "llama3-8b", "--layers", "1", "--tokens", "512",
                           "--mode", "train", "--iterations", "3", "--warmup", "1", "--csv", str(csv_path)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(__import__("csv").DictReader(csv_path.open()))
    assert {r["variant"] for r in rows} == {"weft train step", "torch train step"}, rows
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["relative_error"]) < 2e-2, r
        assert "tokens/s" in r["note"], r


def test_the_compile_pass_puts_weft_into_a_dtensor_model_and_matches_eager():
    """A DTensor tensor-parallel MLP (ColwiseParallel with sequence-sharded input, RowwiseParallel
    with sequence-sharded output), unmodified, compiled with the pass on: inference rewrites the
    all-gather + mm and the mm + reduce-scatter into weft ops, and matches the eager model."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import weft.torch.compile as wcompile

    world = wt.world_size()
    if world == 1 or wt.process_group() is None:
        pytest.skip("needs torch.distributed over several ranks (torchrun)")
    mesh = init_device_mesh("cuda", (world,))

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(512, 1024, bias=False, dtype=torch.bfloat16, device="cuda")
            self.down = torch.nn.Linear(1024, 512, bias=False, dtype=torch.bfloat16, device="cuda")

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)  # the same full weights everywhere; DTensor shards them
    model = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(input_layouts=Shard(0)), "down": RowwiseParallel(output_layouts=Shard(0))})
    x = bf16(64, 512, seed=31 + wt.communicator().rank)
    with torch.no_grad():
        eager = model(x)
        wcompile.enable()
        try:
            compiled = torch.compile(model, fullgraph=True)(x)
        finally:
            wcompile.disable()
    rewritten = sorted(f.op for f in wcompile.report() if f.rewritten)
    assert rewritten == ["ag_gemm", "gemm_rs"], [str(f) for f in wcompile.report()]
    eager, compiled = (t.to_local() if hasattr(t, "to_local") else t for t in (eager, compiled))
    assert rel(compiled, eager) < TOLERANCE


def test_the_compile_pass_puts_weft_into_a_dtensor_models_training_step_and_matches_eager():
    """The DTensor MLP above trained one step, compiled with the pass on: the forward's all-gather +
    up becomes ag_gemm_gathered (the gathered input is saved for up's weight gradient), down +
    reduce-scatter gemm_rs; the backward's all-gather of dy + dy @ W_down becomes ag_gemm_gathered
    (W_down.t() as a kn view; the gathered dy feeds down's weight gradient too) and dh @ W_up +
    reduce-scatter gemm_rs (kn); output and every gradient match the eager step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import weft.torch.compile as wcompile

    world = wt.world_size()
    if world == 1 or wt.process_group() is None:
        pytest.skip("needs torch.distributed over several ranks (torchrun)")
    mesh = init_device_mesh("cuda", (world,))

    def model():
        torch.manual_seed(0)  # the same full weights everywhere; DTensor shards them
        mlp = torch.nn.Sequential(
            torch.nn.Linear(512, 1024, bias=False, dtype=torch.bfloat16, device="cuda"),
            torch.nn.GELU(),
            torch.nn.Linear(1024, 512, bias=False, dtype=torch.bfloat16, device="cuda"),
        )
        return parallelize_module(mlp, mesh, {"0": ColwiseParallel(input_layouts=Shard(0)), "2": RowwiseParallel(output_layouts=Shard(0))})

    x = bf16(64, 512, seed=31 + wt.communicator().rank)
    dy = bf16(64, 512, seed=47 + wt.communicator().rank)

    def step(mlp, forward):
        xs = x.clone().requires_grad_()
        y = forward(xs)
        y = y.to_local() if hasattr(y, "to_local") else y
        y.backward(dy)
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in mlp.parameters()]
        return [y.detach(), xs.grad, *grads]

    eager_model, compiled_model = model(), model()
    eager = step(eager_model, eager_model)
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        wcompile.enable()
        try:
            compiled = step(compiled_model, torch.compile(compiled_model, fullgraph=True))
        finally:
            wcompile.disable()
    report = [str(f) for f in wcompile.report()]
    rewritten = sorted(f.op for f in wcompile.report() if f.rewritten)
    assert rewritten == ["ag_gemm_gathered", "ag_gemm_gathered", "gemm_rs", "gemm_rs"], report
    for got, want in zip(compiled, eager):
        assert rel(got, want) < TOLERANCE, report
