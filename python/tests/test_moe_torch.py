"""The MoE ops through PyTorch on the GPU (world 1 here; several GPUs under torchrun, as
test_torch.py): torch.ops.weft.ag_moe and moe_rs with every strategy that has them and default, on
fresh random inputs and expert choices per call, the result's memory poisoned (NaN) before each
call, against their sequential equivalents in plain torch (plain.ag_moe, plain.moe_rs: all_gather,
a GEMM per expert, the top-k combine, reduce_scatter). The slowest rank's error decides."""

import zlib

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
import weft  # noqa: E402
import weft.torch as wt  # noqa: E402
from weft.torch import plain  # noqa: E402

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


@pytest.mark.parametrize("strategy", ["default", "tilelink"])
def test_the_moe_layer_forward_and_backward_match_plain_torch(strategy):
    rank = wt.communicator().rank
    torch.manual_seed(11 + rank)
    layer = wt.TensorParallelMoE(256, 512, experts=8, topk=2, strategy=strategy)
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
    print(f"moe layer {strategy} world {wt.world_size()}: {errors}")
    assert max(errors.values()) < 2e-2, errors
