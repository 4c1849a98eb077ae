"""The MoE ops through PyTorch on the GPU (world 1 here; several GPUs under torchrun, as
test_torch.py): torch.ops.weft.ag_moe and moe_rs with every strategy that has them and default, on
fresh random inputs and expert choices per call, the result's memory poisoned (NaN) before each
call, against their sequential equivalents in plain torch (plain.ag_moe, plain.moe_rs: all_gather,
a GEMM per expert, the top-k combine, reduce_scatter). The slowest rank's error decides. With the
router's ids on the GPU: new ids per call, a CUDA graph replayed on new ids, torch.compile of a
router and both ops, refusals before launching; the layer with either routing."""

import zlib

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
import weft  # noqa: E402
import weft.torch as wt  # noqa: E402
from weft.torch import comm, moe, plain  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def communicator(weft_on_this_gpu):
    return weft_on_this_gpu


def rel(got, want):
    got, want = got.double(), want.double()
    error = float("inf") if torch.isnan(got).any() else ((got - want).norm() / want.norm()).item()
    return checking.slowest(error)


def strategies(op):
    return [name for name, _, _, ops in weft.strategies() if op in ops] + ["default"]


def choices_for(world, rows, experts, topk, seed):
    """Every rank's experts per token (distinct per token), the same table on every rank."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(rows)]).reshape(-1)
                        for _ in range(world)]).to(torch.int32)


@pytest.mark.parametrize("op", ["ag_moe", "moe_rs"])
def test_the_moe_ops_match_their_sequential_equivalents(op):
    world, rank = wt.world_size(), wt.communicator().rank
    experts, topk, n, k = 4, 2, 136, 64
    for strategy in strategies(op):
        for call, rows in enumerate((96, 40)):
            seed = zlib.crc32(f"{op} {strategy} {call}".encode()) % (1 << 30)
            choices = choices_for(world, rows, experts, topk, seed)
            a = checking.inputs(world * rows * topk if op == "moe_rs" else rows, k, seed=seed + 1 + rank)
            b = checking.inputs(experts * n, k, seed=seed + 2 + rank)
            out_rows = world * rows * topk if op == "ag_moe" else rows
            torch.full((out_rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: the result's block, poisoned
            if op == "ag_moe":
                got = wt.ops.ag_moe(a, b, choices, experts, strategy)
                want = plain.ag_moe(a, b, choices, experts)
            else:
                weights = checking.inputs(world * rows, topk, seed=seed + 3)  # every rank's tokens' weights: the same on every rank
                got = wt.ops.moe_rs(a, b, choices, weights, experts, strategy)
                want = plain.moe_rs(a, b, choices, weights, experts)
            wt.synchronize()
            assert got.shape == (out_rows, n), (strategy, got.shape)
            error = rel(got, want)
            print(f"{op} {strategy} rows {rows} world {world}: {error:.2e}")
            assert error < 1e-2, (strategy, rows, error)


def ids_for(rows, experts, topk, seed, dtype=torch.int32):
    """This rank's router ids [rows, topk] on the GPU (distinct per token), and every rank's table
    [W, rows * topk] they make (each rank draws its own: seed + rank)."""
    world, rank = wt.world_size(), wt.communicator().rank
    table = choices_for(world, rows, experts, topk, seed)  # rank r's row: the ids rank r gives
    return table[rank].reshape(rows, topk).to(device="cuda", dtype=dtype), table


def call_with_ids(op, rows, n, k, experts, topk, seed, strategy="default", dtype=torch.int32):
    """One call with this rank's ids on the GPU: (got, want) against the plain equivalent on every
    rank's table, the result's memory poisoned first."""
    world, rank = wt.world_size(), wt.communicator().rank
    ids, table = ids_for(rows, experts, topk, seed, dtype)
    a = checking.inputs(world * rows * topk if op == "moe_rs" else rows, k, seed=seed + 1 + rank)
    b = checking.inputs(experts * n, k, seed=seed + 2 + rank)
    out_rows = world * rows * topk if op == "ag_moe" else rows
    torch.full((out_rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: the result's block, poisoned
    if op == "ag_moe":
        return wt.ops.ag_moe(a, b, ids, experts, strategy), plain.ag_moe(a, b, table, experts)
    weights = checking.inputs(world * rows, topk, seed=seed + 3)
    return wt.ops.moe_rs(a, b, ids, weights, experts, strategy), plain.moe_rs(a, b, table, weights, experts)


@pytest.mark.parametrize("op", ["ag_moe", "moe_rs"])
def test_the_moe_ops_take_the_router_ids_on_the_gpu(op):
    # New routing every call on one op (one plan per row count serves them all), int32 ids and
    # torch.topk's int64 through weft.torch.ops, the strategies that take ids.
    experts, topk = 6, 2
    n, k = (192, 64) if op == "ag_moe" else (128, 96)  # N of the grouped GEMM's tiles (96, 128, 192, 256)
    for strategy in ("default", "sequential"):
        for call, (rows, dtype) in enumerate(((96, torch.int32), (96, torch.int64), (40, torch.int32), (96, torch.int32))):
            seed = zlib.crc32(f"ids {op} {strategy} {call}".encode()) % (1 << 30)
            got, want = call_with_ids(op, rows, n, k, experts, topk, seed, strategy, dtype)
            wt.synchronize()
            error = rel(got, want)
            print(f"{op} {strategy} ids call {call} rows {rows} {dtype} world {wt.world_size()}: {error:.2e}")
            assert error < 1e-2, (strategy, call, error)


def test_the_moe_ops_refuse_ids_they_cannot_take_before_launching():
    world = wt.world_size()
    a, b = checking.inputs(32, 64, seed=1), checking.inputs(4 * 128, 64, seed=2)
    ids, _ = ids_for(32, 4, 2, seed=3)
    weights, rows = checking.inputs(world * 32, 2, seed=4), checking.inputs(world * 32 * 2, 64, seed=5)
    b136 = checking.inputs(4 * 136, 64, seed=6)
    ids64, short, strided, one_choice = ids.long(), ids[:31].contiguous(), torch.cat([ids, ids], 1)[:, ::2], ids[:, :1].contiguous()
    torch.cuda.synchronize()  # every input on the GPU first: the refusals below must launch nothing
    with pytest.raises(ValueError, match=r"torch.int32, got torch.int64"):
        torch.ops.weft.ag_moe(a, b, ids64, 4, 0)
    with pytest.raises(ValueError, match=r"this rank's \[rows, topk\] = \[32, topk\]"):
        torch.ops.weft.ag_moe(a, b, short, 4, 0)
    with pytest.raises(ValueError, match="contiguous"):
        torch.ops.weft.ag_moe(a, b, strided, 4, 0)
    with pytest.raises(ValueError, match=r"\[rows, topk\] = \[32, 2\]"):
        torch.ops.weft.moe_rs(rows, b, one_choice, weights, 4, 0)
    with pytest.raises(ValueError, match=r"grouped GEMM only.*n=136"):  # a shape the routed plan has no GEMM for
        torch.ops.weft.ag_moe(a, b136, ids, 4, 0)
    with pytest.raises(ValueError, match="tilelink"):
        wt.ops.ag_moe(a, b, ids, 4, "tilelink")  # a strategy whose plans need the host table
    assert torch.cuda.current_stream().query(), "nothing was launched"


def test_the_moe_ops_replay_in_a_cuda_graph_on_new_ids():
    world, rank = wt.world_size(), wt.communicator().rank
    experts, topk, rows, n, k = 5, 2, 64, 128, 128
    ids, table = ids_for(rows, experts, topk, seed=70)
    x = checking.inputs(rows, k, seed=71 + rank)
    w1, w2 = checking.inputs(experts * n, k, seed=72 + rank), checking.inputs(experts * k, n, seed=73 + rank)
    weights = checking.inputs(world * rows, topk, seed=74)

    def layer():
        h = wt.ops.ag_moe(x, w1, ids, experts)
        return h, wt.ops.moe_rs(h, w2, ids, weights, experts)

    side = torch.cuda.Stream()  # torch.cuda.graph's warm-up: eager calls plan and lower these shapes
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        h, z = layer()
    for i in range(6):
        new_ids, table = ids_for(rows, experts, topk, seed=80 + i)
        ids.copy_(new_ids)
        x.copy_(checking.inputs(rows, k, seed=90 + 10 * i + rank))
        h.fill_(float("nan"))
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        wt.check_errors()
        want_h = plain.ag_moe(x, w1, table, experts)
        want_z = plain.moe_rs(h, w2, table, weights, experts)
        errors = (rel(h, want_h), rel(z, want_z))
        print(f"graph replay {i} world {world}: {errors}")
        assert max(errors) < 1e-2, (i, errors)


def test_the_moe_ops_with_ids_compile_fullgraph_and_equal_eager():
    world, rank = wt.world_size(), wt.communicator().rank
    experts, topk, rows, n, k = 4, 2, 48, 128, 128
    x = checking.inputs(rows, k, seed=101 + rank)
    gate = checking.inputs(experts, k, seed=102)  # the same router on every rank
    w1, w2 = checking.inputs(experts * n, k, seed=103 + rank), checking.inputs(experts * k, n, seed=104 + rank)

    def step(x):
        # The router's int64 top-k ids go to the ops as they are (weft.torch.ops converts them).
        ids, weights = moe.route(x, gate, topk)
        h = wt.ops.ag_moe(x, w1, ids, experts)
        # all_gather_into_tensor, which dynamo traces as a functional collective (no autograd here).
        weights_all = comm.all_gather_rows(weights)
        return wt.ops.moe_rs(torch.nn.functional.gelu(h), w2, ids, weights_all, experts), ids

    def plain_step(x, ids):  # the same under the ids a pass picked (a near-tie may flip between passes)
        table = plain._all_gather(ids.to(torch.int32).contiguous()).reshape(world, -1)
        h = plain.ag_moe(x, w1, table, experts)
        weights_all = plain._all_gather(moe.route(x, gate, topk, ids)[1])
        return plain.moe_rs(torch.nn.functional.gelu(h), w2, table, weights_all, experts)

    eager, ids = step(x)
    assert rel(eager, plain_step(x, ids)) < 2e-2
    compiled, compiled_ids = torch.compile(step, fullgraph=True)(x)
    assert rel(compiled, plain_step(x, compiled_ids)) < 2e-2
    # Against eager where both passes picked the same experts (rel is collective: every rank computes it).
    error = rel(compiled, eager)
    if torch.equal(compiled_ids, ids):
        assert error < 1e-2


@pytest.mark.parametrize("strategy, routing", [("default", "ids"), ("default", "table"), ("tilelink", None)])
def test_the_moe_layer_forward_and_backward_match_plain_torch(strategy, routing):
    rank = wt.communicator().rank
    torch.manual_seed(11 + rank)
    layer = wt.TensorParallelMoE(256, 512, experts=8, topk=2, strategy=strategy, routing=routing)
    assert layer.routing == (routing or "table")
    x = checking.inputs(192, 256, seed=40 + rank)
    dz = checking.inputs(192, 256, seed=50 + rank)
    results = []
    for plain_products in (False, True):
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        z = layer(xi, plain_products=plain_products)
        z.backward(dz)
        results.append([z.detach(), xi.grad] + [p.grad.clone() for p in (layer.gate, layer.w1, layer.w2)])
    wt.synchronize()
    errors = {name: rel(ours, theirs) for name, ours, theirs in zip(("z", "dx", "dgate", "dw1", "dw2"), *results)}
    print(f"moe layer {strategy} routing {layer.routing} world {wt.world_size()}: {errors}")
    assert max(errors.values()) < 2e-2, errors
