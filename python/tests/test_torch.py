"""weft through PyTorch on the GPU (world 1 here; the multi-GPU runs use the same tests under
torchrun): every op against torch, argument checks before any launch, torch.compile(fullgraph=True),
a captured torch.cuda.graph replayed 100 times with new inputs, the tensor-parallel layers' forward
and backward against plain torch, and weft.benchmark's table."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import weft  # noqa: E402
import weft.torch as wt  # noqa: E402
from weft.torch import plain  # noqa: E402

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-2  # bf16 results against torch's


@pytest.fixture(scope="module", autouse=True)
def communicator():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if "WORLD_SIZE" in os.environ and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    return wt.init()


def rel(got, want):
    got, want = got.float(), want.float()
    assert not torch.isnan(got).any(), "NaN in the result"
    return ((got - want).norm() / want.norm()).item()


def bf16(*shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.rand(shape, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)


def everyone(x):
    """Every rank's x, stacked by rank."""
    return wt.layers.all_gather_rows(x)


def reference(op, a, b, routing=None):
    """The op computed by torch (every rank's inputs gathered)."""
    world, rank = wt.world_size(), wt.communicator().rank
    if op == "ag_gemm":
        return everyone(a).float() @ b.float().t()
    if op in ("gemm_rs", "gemm_ar"):
        # sum_r A_r B_r^T: gather every rank's A and B and add their products.
        a_all, b_all = everyone(a).float().chunk(world), everyone(b).float().chunk(world)
        total = sum(x @ y.t() for x, y in zip(a_all, b_all))
        return total.chunk(world)[rank] if op == "gemm_rs" else total
    a_all, b_all = everyone(a).float().chunk(world), everyone(b).float().chunk(world)
    rows = []
    for source in range(world):
        mine = routing[source] == rank
        if op == "gemm_a2a":
            rows.append((a_all[source] @ b_all[source].t())[mine])
        else:
            rows.append(a_all[source][mine] @ b.float().t())
    return torch.cat(rows)


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


@pytest.mark.parametrize("op, strategy", cases())
def test_every_op_and_strategy_equals_torch(op, strategy):
    world = wt.world_size()
    rows = 96 * world if op == "gemm_rs" else 200  # ragged against 128-row tiles
    a, b = bf16(rows, 136, seed=1 + wt.communicator().rank), bf16(264, 136, seed=100 + wt.communicator().rank)
    routing = None
    if op in ("gemm_a2a", "a2a_gemm"):
        routing = torch.randint(0, world, (world, rows), generator=torch.Generator().manual_seed(7), dtype=torch.int32)
        got = getattr(torch.ops.weft, op)(a, b, routing, strategy)
    else:
        got = getattr(torch.ops.weft, op)(a, b, strategy)
    assert got.shape == reference(op, a, b, routing).shape
    assert rel(got, reference(op, a, b, routing)) < TOLERANCE


def test_wrong_inputs_are_rejected_before_any_launch():
    a, b = bf16(128, 128, seed=1), bf16(256, 128, seed=2)
    torch.cuda.synchronize()
    bad = [
        (a.half(), b, "bfloat16"),
        (a.cpu(), b, "on cpu"),
        (a, b.t(), "contiguous"),
        (a.view(-1)[1:1 + 127 * 128].view(127, 128), b, "16-byte"),
        (a, bf16(256, 64, seed=3), "k="),
        (a.unsqueeze(0), b, "2-D"),
    ]
    for x, y, words in bad:
        with pytest.raises(ValueError, match=words):
            torch.ops.weft.gemm_ar(x, y)
    with pytest.raises(ValueError, match="routing"):
        torch.ops.weft.gemm_a2a(a, b, torch.zeros((wt.world_size(), 5), dtype=torch.int32))
    with pytest.raises(ValueError, match="unknown strategy"):
        torch.ops.weft.gemm_ar(a, b, "nonsense")
    assert torch.cuda.current_stream().query(), "nothing was launched"


def test_a_model_compiles_fullgraph_and_equals_eager():
    world = wt.world_size()
    x, w1, w2 = bf16(128, 512, seed=11), bf16(1024 // world, 512, seed=12), bf16(512, 1024 // world, seed=13)

    def step(x, w1, w2):
        h = torch.nn.functional.gelu(torch.ops.weft.ag_gemm(x, w1))
        y = torch.ops.weft.gemm_rs(h, w2)
        return torch.ops.weft.gemm_ar(y, w1) * 0.5

    eager = step(x, w1, w2)
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
    worst = 0.0
    for i in range(100):
        a.copy_(bf16(64, 128, seed=1000 + i + 7 * wt.communicator().rank))
        b.copy_(bf16(256, 128, seed=5000 + i + 7 * wt.communicator().rank))
        b_t.copy_(b.t())
        graph.replay()
        torch.cuda.synchronize()
        wt.check_errors()
        want_gathered = reference("ag_gemm", a, b)
        worst = max(worst, rel(gathered, want_gathered))
        want = reference("gemm_rs", gathered, b_t)
        worst = max(worst, rel(out, want))
    assert worst < TOLERANCE


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_the_mlp_layer_matches_plain_torch_forward_and_backward(sequence_parallel):
    world = wt.world_size()
    torch.manual_seed(5)
    layer = wt.TensorParallelMLP(512, 1024, sequence_parallel=sequence_parallel)
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
