"""weft.torch's decoder block against references: at world 1 (on the CPU in float32, no GPU needed)
against the block's definition written out independently in float64 (RMSNorm, rotary positions as
complex rotations, softmax attention with an explicit causal mask and repeated kv heads, SwiGLU),
forward and every gradient; on GPUs (world 1, and every rank under torchrun) weft's block against
the same block through plain torch (torch.mm + torch.distributed) with the same weights."""

import math
import types

import pytest

torch = pytest.importorskip("torch")

import checking  # noqa: E402
from weft import models  # noqa: E402

try:
    import weft.torch as wt  # noqa: E402
    from weft.torch import comm  # noqa: E402
except Exception as e:  # the native module without a usable libtorch
    pytest.skip(f"weft.torch does not import here: {e}", allow_module_level=True)

# A Llama-3-8B layer with every width cut by 8 (4 query heads over 1 kv head, head dim 128), and a
# tiny GQA layer (4 query heads over 2 kv heads).
SMALL = models.scaled(models.config("llama3-8b"), 8)
TINY = models.ModelConfig("tiny-gqa", hidden=64, ffn=96, heads=4, kv_heads=2, head_dim=16)


def definition(x, w, cfg):
    """The block's definition in float64: x [s, b, hidden], w the block's parameters by name (world 1)."""
    d, hq, hkv = cfg.head_dim, cfg.heads, cfg.kv_heads

    def rms(v, weight):
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * weight

    def rope(t):  # t [s, b, heads, d]: pairs (i, i + d/2) rotated by position * theta^(-2i/d)
        s = t.shape[0]
        freqs = cfg.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        turn = torch.polar(torch.ones(s, d // 2, dtype=torch.float64), torch.arange(s, dtype=torch.float64)[:, None] * freqs[None, :])
        z = torch.complex(t[..., : d // 2], t[..., d // 2 :]) * turn[:, None, None, :]
        return torch.cat((z.real, z.imag), -1)

    s, b, _ = x.shape
    qkv = rms(x, w["attention_norm.weight"]) @ w["attention.qkv.weight"].t()
    q = rope(qkv[..., : hq * d].reshape(s, b, hq, d))
    k = rope(qkv[..., hq * d : (hq + hkv) * d].reshape(s, b, hkv, d)).repeat_interleave(hq // hkv, dim=2)
    v = qkv[..., (hq + hkv) * d :].reshape(s, b, hkv, d).repeat_interleave(hq // hkv, dim=2)
    scores = torch.einsum("sbhd,tbhd->bhst", q, k) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    attended = torch.einsum("bhst,tbhd->sbhd", scores.softmax(-1), v).reshape(s, b, hq * d)
    h = x + attended @ w["attention.out.weight"].t()
    gate, up = (rms(h, w["mlp_norm.weight"]) @ w["mlp.gate_up.weight"].t()).split(cfg.ffn, dim=-1)
    return h + (torch.nn.functional.silu(gate) * up) @ w["mlp.down.weight"].t()


@pytest.fixture
def world_of_one_on_the_cpu(monkeypatch):
    """At world 1 every weft op is its GEMM alone (a @ b.T, nothing communicated): with a stand-in
    communicator and the ops' world-1 meaning on the CPU, the layers' autograd functions and the
    block around them run here. The ops themselves are checked on GPUs (test_torch.py)."""
    from weft.torch import layers

    monkeypatch.setitem(comm._state, "comm", types.SimpleNamespace(world_size=1, rank=0))
    monkeypatch.setitem(comm._state, "group", None)
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        monkeypatch.setattr(layers, op, lambda a, b, strategy="default": torch.mm(a, b.t()))


def randomised(block, seed):
    """Random norm weights too (ones would hide a missing or misplaced norm)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.copy_((1 + 0.5 * (torch.rand(p.shape, generator=g) * 2 - 1)).to(p.dtype))
    return block


@pytest.mark.parametrize("cfg", [TINY, SMALL], ids=lambda c: c.name)
def test_block_at_world_one_is_its_definition(world_of_one_on_the_cpu, cfg):
    torch.manual_seed(3)
    block = randomised(wt.DecoderBlock(cfg, device="cpu", dtype=torch.float32), 5)
    s, b = 24, 2
    x = (torch.rand(s, b, cfg.hidden) * 2 - 1).requires_grad_()
    w = {name: p.detach().double().requires_grad_() for name, p in block.named_parameters()}
    assert sorted(w) == sorted(["attention_norm.weight", "attention.qkv.weight", "attention.out.weight", "mlp_norm.weight",
                                "mlp.gate_up.weight", "mlp.down.weight"])
    x64 = x.detach().double().requires_grad_()
    y, want = block(x), definition(x64, w, cfg)
    assert y.shape == (s, b, cfg.hidden) and not torch.isnan(y).any()
    error = ((y.double() - want).norm() / want.norm()).item()
    assert error < 1e-5, f"forward differs from the definition: relative error {error:.2e}"
    # Every gradient: the block's (its autograd functions at world 1) against autograd through the definition.
    grad = torch.rand_like(y) * 2 - 1
    y.backward(grad)
    want.backward(grad.double())
    for name, p in block.named_parameters():
        e = ((p.grad.double() - w[name].grad).norm() / w[name].grad.norm()).item()
        assert e < 1e-4, f"gradient of {name}: relative error {e:.2e}"
    e = ((x.grad.double() - x64.grad).norm() / x64.grad.norm()).item()
    assert e < 1e-4, f"input gradient: relative error {e:.2e}"
    # The plain path (plain.py's products and collectives, the same weights) is the same function.
    with torch.no_grad():
        plain_error = ((block(x, plain=True).double() - want).norm() / want.norm()).item()
    assert plain_error < 1e-5, f"plain=True differs from the definition: {plain_error:.2e}"


def test_a_stack_applies_its_blocks_in_turn(world_of_one_on_the_cpu):
    torch.manual_seed(4)
    stack = wt.DecoderStack(TINY, 3, device="cpu", dtype=torch.float64)
    x = torch.rand(8, 1, TINY.hidden, dtype=torch.float64)
    want = x
    for block in stack.blocks:
        want = definition(want, dict(block.named_parameters()), TINY)
    assert torch.allclose(stack(x), want, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="layers=0"):
        wt.DecoderStack(TINY, 0, device="cpu")

def test_a_mixture_of_experts_block_is_its_definition_through_plain_torch(world_of_one_on_the_cpu):
    """Mixtral's block cut by 8 at world 1 on the CPU through plain torch (the ops' sequential
    equivalents): its MLP against the MoE written out in float64 (softmax top-k renormalised, each
    chosen expert's SwiGLU, weighted sum), and a backward that reaches every parameter."""
    cfg = models.scaled(models.config("mixtral-8x7b"), 8)
    torch.manual_seed(9)
    block = wt.DecoderBlock(cfg, device="cpu", dtype=torch.float64)
    x = torch.rand(8, 2, cfg.hidden, dtype=torch.float64, requires_grad=True)
    moe = block.mlp.moe
    flat = x.detach().reshape(16, cfg.hidden)
    probabilities = torch.softmax(flat @ moe.gate.detach().t(), dim=-1)
    values, ids = torch.topk(probabilities, cfg.topk, dim=-1)
    weights = values / values.sum(-1, keepdim=True)
    want = torch.zeros(16, cfg.hidden, dtype=torch.float64)
    f = cfg.ffn
    for t in range(16):
        for j in range(cfg.topk):
            e = int(ids[t, j])
            w1 = moe.w1.detach()[e * 2 * f:(e + 1) * 2 * f]
            h = torch.nn.functional.silu(flat[t] @ w1[:f].t()) * (flat[t] @ w1[f:].t())
            want[t] += weights[t, j] * (h @ moe.w2.detach()[e * cfg.hidden:(e + 1) * cfg.hidden].t())
    got = block.mlp(x.detach(), plain=True).reshape(16, cfg.hidden)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (got - want).abs().max()
    block(x, plain=True).sum().backward()
    assert x.grad is not None and all(p.grad is not None and torch.isfinite(p.grad).all() for p in block.parameters())


def test_async_tp_products_are_refused_where_they_cannot_run(world_of_one_on_the_cpu):
    # AsyncTP's fused ops gather and scatter rows across ranks and have no backward: at world 1, or
    # with autograd on, the block says so before any product runs.
    block = wt.DecoderBlock(TINY, device="cpu", dtype=torch.float32)
    x = torch.rand(8, 1, TINY.hidden)
    with torch.no_grad(), pytest.raises(ValueError, match="sequence-parallel layers over several ranks"):
        block(x, plain="async_tp")


def test_async_tp_products_reach_torch_symm_mem_ops_in_a_fresh_process():
    # torch.ops.symm_mem's fused ops exist only once torch.distributed._symmetric_memory is imported:
    # plain.py imports it before looking the op up (looked up first, the product failed with
    # AttributeError in a process that had not imported it yet). On the CPU the op itself cannot run;
    # any error but the missing op is what this checks.
    import subprocess
    import sys

    code = (
        "import os, torch, torch.distributed as dist\n"
        "os.environ.setdefault('MASTER_ADDR', '127.0.0.1'); os.environ.setdefault('MASTER_PORT', '29517')\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "from weft.torch import plain\n"
        "x, w = torch.rand(4, 8), torch.rand(6, 8)\n"
        "for product in (plain.column_parallel_async_tp, plain.row_parallel_async_tp):\n"
        "    try:\n"
        "        product(x, w)\n"
        "        print('RAN')\n"
        "    except AttributeError as e:\n"
        "        print('MISSING-OP', e)\n"
        "    except Exception as e:\n"
        "        print('REACHED', type(e).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.split(" ")[0] in ("RAN", "MISSING-OP", "REACHED")]
    assert len(lines) == 2 and not any(line.startswith("MISSING-OP") for line in lines), done.stdout + done.stderr


# --- on GPUs: weft's block against the same block through plain torch, every rank -----------------


@pytest.mark.gpu
@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sequence-parallel", "tensor-parallel"])
def test_block_through_weft_matches_plain_torch(weft_on_this_gpu, sequence_parallel):
    world, rank = wt.world_size(), weft_on_this_gpu.rank
    cfg = TINY if world <= 2 else models.ModelConfig("tiny-gqa-w", hidden=128, ffn=64 * world, heads=2 * world, kv_heads=world, head_dim=16)
    torch.manual_seed(11 + rank)  # each rank its own weight shards
    block = randomised(wt.DecoderBlock(cfg, sequence_parallel=sequence_parallel), 7)  # norms replicated, as in a model
    s, b = 64 * world, 2
    g = torch.Generator().manual_seed(5 if not sequence_parallel else 5 + rank)  # tensor parallel: the same x everywhere
    x = ((torch.rand(s // world if sequence_parallel else s, b, cfg.hidden, generator=g) * 2 - 1).to(torch.bfloat16).cuda()).requires_grad_()
    x_plain = x.detach().clone().requires_grad_()
    y, y_plain = block(x), block(x_plain, plain=True)
    # A replicated output (tensor parallel) gets the same gradient on every rank, as from a real loss.
    grad_seed = 9 + rank if sequence_parallel else 9
    grad = (torch.rand(y.shape, generator=torch.Generator().manual_seed(grad_seed)) * 2 - 1).to(torch.bfloat16).cuda()
    y.backward(grad)
    weft_grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    block.zero_grad()
    y_plain.backward(grad)

    def rel(got, want, what):
        # The largest error over the ranks (checking.slowest): every rank passes or fails together.
        e = float("inf") if torch.isnan(got).any() else ((got.float() - want.float()).norm() / want.float().norm()).item()
        e = checking.slowest(e)
        assert e < 2e-2, f"{what}: relative error {e:.2e} against plain torch (largest over the ranks; inf: NaN)"

    rel(y, y_plain, "output")
    rel(x.grad, x_plain.grad, "input gradient")
    for name, p in block.named_parameters():
        rel(weft_grads[name], p.grad, f"gradient of {name}")


@pytest.mark.gpu
def test_a_mixture_of_experts_block_through_weft_matches_plain_torch(weft_on_this_gpu):
    """A small MoE block (4 experts, top 2, SwiGLU experts sharded over the ranks), sequence parallel:
    weft's (ag_moe / moe_rs, the MoE backward of weft/torch/moe.py) against plain torch's autograd."""
    world, rank = wt.world_size(), weft_on_this_gpu.rank
    cfg = models.ModelConfig("tiny-moe", hidden=128, ffn=64 * world, heads=2 * world, kv_heads=world, head_dim=16, experts=4, topk=2)
    torch.manual_seed(13 + rank)
    block = wt.DecoderBlock(cfg)
    g = torch.Generator().manual_seed(21 + rank)
    x = ((torch.rand(64, 2, cfg.hidden, generator=g) * 2 - 1).to(torch.bfloat16).cuda()).requires_grad_()
    x_plain = x.detach().clone().requires_grad_()
    grad = (torch.rand(64, 2, cfg.hidden, generator=torch.Generator().manual_seed(31 + rank)) * 2 - 1).to(torch.bfloat16).cuda()
    y = block(x)
    y.backward(grad)
    weft_grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    block.zero_grad()
    y_plain = block(x_plain, plain=True)
    y_plain.backward(grad)
    for what, got, want in [("output", y, y_plain), ("input gradient", x.grad, x_plain.grad)] + [
            (f"gradient of {n}", weft_grads[n], p.grad) for n, p in block.named_parameters()]:
        e = float("inf") if torch.isnan(got).any() else ((got.float() - want.float()).norm() / want.float().norm()).item()
        e = checking.slowest(e)
        assert e < 2e-2, f"{what}: relative error {e:.2e} against plain torch (largest over the ranks)"
