"""The MoE ops through PyTorch, on the CPU: the row layout the plain equivalents use (plain.py's
moe_row_order) is the C++ definition's (ir/problem.hpp's moe_rows, through weft._native), and the
fake kernels give the results' shapes and refuse what the kernels refuse. On the GPU (world 1 here,
several under torchrun): test_moe_torch.py. And weft.torch.TensorParallelMoE at world 2 over gloo
(moe_world_of_two.py): its backward against plain torch's autograd."""

import pytest

import gloo_world  # this folder's (python/tests)

torch = pytest.importorskip("torch")

try:
    import weft
    import weft.torch as wt  # noqa: F401
    from weft.torch import comm, plain
except (ImportError, OSError) as e:
    pytest.skip(f"weft.torch is not importable: {e}", allow_module_level=True)

import types  # noqa: E402


@pytest.mark.parametrize("world, rows, experts, topk", [(1, 5, 4, 2), (2, 7, 8, 2), (4, 3, 6, 3)])
def test_the_plain_row_order_is_the_definition(world, rows, experts, topk):
    g = torch.Generator().manual_seed(world * 100 + rows)
    choices = torch.stack([torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(rows)]).reshape(-1) for _ in range(world)])
    want = weft._native.moe_row_order(choices.tolist(), experts, topk)
    assert plain.moe_row_order(choices, topk).tolist() == list(want)


def test_the_strategy_ids_are_the_native_modules():
    # weft.torch.ops reads its table once (a dict torch.compile traces); the ops map ids back natively.
    from weft.torch import ops

    names = ["default"] + [name for name, _, _, _ in weft.strategies()]
    assert [ops.strategy_id(n) for n in names] == [weft._native.strategy_id(n) for n in names] == list(range(len(names)))
    with pytest.raises(ValueError, match="sequential"):
        ops.strategy_id("nonsense")


def test_the_fake_kernels_give_the_results_shapes_and_refuse_bad_inputs(monkeypatch):
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=2, rank=0))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        a = torch.empty(16, 64, dtype=torch.bfloat16)
        b = torch.empty(4 * 32, 64, dtype=torch.bfloat16)
        choices = torch.empty(2, 16 * 2, dtype=torch.int32)
        assert torch.ops.weft.ag_moe(a, b, choices, 4, 0).shape == (2 * 16 * 2, 32)
        weights = torch.empty(2 * 16, 2, dtype=torch.bfloat16)
        rows = torch.empty(2 * 16 * 2, 64, dtype=torch.bfloat16)
        assert torch.ops.weft.moe_rs(rows, b, choices, weights, 4, 0).shape == (16, 32)
        with pytest.raises(ValueError, match=r"B must be \[experts \* n, k\] with experts=3"):
            torch.ops.weft.ag_moe(a, b, choices, 3, 0)
        with pytest.raises(ValueError, match=r"choices on the CPU must be \[world_size, rows \* topk\]"):
            torch.ops.weft.ag_moe(a, b, torch.empty(1, 32, dtype=torch.int32), 4, 0)
        # The router's ids on the GPU: this rank's [rows, topk] int32; the shapes are the table's.
        ids = torch.empty(16, 3, dtype=torch.int32, device="cuda")
        assert torch.ops.weft.ag_moe(a, b, ids, 4, 0).shape == (2 * 16 * 3, 32)
        assert torch.ops.weft.moe_rs(rows, b, ids[:, :2].contiguous(), weights, 4, 0).shape == (16, 32)
        with pytest.raises(ValueError, match=r"choices on the GPU must be this rank's \[rows, topk\] torch.int32 with rows=16"):
            torch.ops.weft.ag_moe(a, b, ids.long(), 4, 0)
        with pytest.raises(ValueError, match=r"choices on the GPU must be this rank's \[rows, topk\] = \[16, 2\]"):
            torch.ops.weft.moe_rs(rows, b, ids, weights, 4, 0)


@pytest.mark.parametrize("op", ["ag_moe", "moe_rs"])
def test_the_grouped_mm_equivalents_match_the_loop_over_experts(monkeypatch, op):
    # weft.benchmark's "torch:grouped_mm" baseline (one torch._grouped_mm over every expert, groups
    # padded to 16 rows) must compute what the loop over experts does, empty experts included.
    if not plain.has_grouped_mm():
        pytest.skip("this torch has no _grouped_mm")
    try:
        torch._grouped_mm(torch.zeros(16, 16, dtype=torch.bfloat16), torch.zeros(1, 16, 16, dtype=torch.bfloat16),
                          offs=torch.tensor([16], dtype=torch.int32))
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"this torch's _grouped_mm has no CPU path: {e}")
    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=1, rank=0))
    g = torch.Generator().manual_seed(7)
    rows, experts, topk, n, k = 37, 6, 2, 48, 32
    # Experts 4 and 5 picked by nobody, expert 0 by most tokens.
    choices = torch.stack([torch.tensor([0, 1 + i % 3] if i % 4 else [2, 3]) for i in range(rows)]).reshape(1, -1)
    b = torch.randn(experts * n, k, generator=g).to(torch.bfloat16)
    if op == "ag_moe":
        a = torch.randn(rows, k, generator=g).to(torch.bfloat16)
        want, got = plain.ag_moe(a, b, choices, experts), plain.ag_moe_grouped(a, b, choices, experts)
    else:
        a = torch.randn(rows * topk, k, generator=g).to(torch.bfloat16)
        weights = torch.rand(rows, topk, generator=g).to(torch.bfloat16)
        want, got = plain.moe_rs(a, b, choices, weights, experts), plain.moe_rs_grouped(a, b, choices, weights, experts)
    assert got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0)


def test_the_moe_layer_at_world_two_over_gloo_matches_plain_torch():
    """moe_world_of_two.py in processes of its own: the output and the gradients of the input, the
    router, w1 and w2 against the same layer through plain torch's autograd, two shapes, two strategies
    (default with the router's ids and with the host table; tilelink with the table), the backward
    through torch._grouped_mm and through the loop over experts; and the layer's choice of routing."""
    import re

    stdout = gloo_world.run_script("moe_world_of_two.py")
    paths = 2 if hasattr(torch, "_grouped_mm") else 1  # the backward through torch._grouped_mm, then the loop
    assert len(re.findall(r"rank \d experts", stdout)) == 2 * 2 * 3 * paths, stdout
    assert len(re.findall(r"default ids", stdout)) == 2 * 2 * paths, stdout


def test_fixed_routing_takes_the_given_experts_and_their_router_weights():
    # The model-step benchmark compares weft's pass with plain torch's under the same routing: route()
    # given ids keeps them (not the top-k) and weighs them as the router would (renormalised softmax).
    from weft.torch.moe import route

    g = torch.Generator().manual_seed(3)
    x, gate = torch.randn(6, 16, generator=g), torch.randn(5, 16, generator=g)
    ids, weights = route(x, gate, 2)
    probabilities = torch.softmax(x @ gate.t(), dim=-1)
    assert torch.equal(ids, torch.topk(probabilities, 2, dim=-1).indices)
    other = (ids + 1) % 5  # never the top-k's
    fixed_ids, fixed_weights = route(x, gate, 2, other)
    assert torch.equal(fixed_ids, other)
    chosen = probabilities.gather(-1, other)
    torch.testing.assert_close(fixed_weights, chosen / chosen.sum(-1, keepdim=True))
    assert not torch.allclose(fixed_weights, weights)
