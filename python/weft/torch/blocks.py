"""Transformer blocks over weft's tensor-parallel layers: a Llama-style decoder block (RMSNorm,
grouped-query attention with rotary positions and causal masking, SwiGLU MLP, or for a mixture-of-
experts config such as Mixtral's, SwiGLU experts sharded over the ranks through ag_moe / moe_rs:
weft/torch/moe.py) with Megatron tensor + sequence parallelism.

Layout (Megatron's): activations are [s, b, hidden], sequence-first; with sequence parallelism each
rank holds s / W of the positions ([s/W, b, hidden]) and the column-parallel layers gather them
(ag_gemm), the row-parallel ones scatter them back (gemm_rs); without it every rank holds all s.
Per rank (W ranks): heads / W query heads and kv_heads / W kv heads (whole GQA groups), ffn / W of
the MLP. The attention itself runs on the rank's own heads over the whole sequence, through the
installed torch's scaled_dot_product_attention (causal, GQA).

    block = weft.torch.DecoderBlock(weft.models.config("llama3-8b"))
    y = block(x)                 # x [s/W, b, 4096] bf16 on this rank's GPU
    y_ref = block(x, plain=True) # the same block, same weights, through torch.mm + torch.distributed

`plain=True` runs every tensor-parallel product through weft/torch/plain.py (the layers' sequential
equivalent), so a block and its reference share everything but the products and collectives;
`plain="async_tp"` runs them through PyTorch AsyncTP's fused ops (sequence parallel, forward only).
save_gathered_input (every constructor) goes to the column-parallel layers (qkv, gate_up): each keeps
the input its forward gathered for its weight gradient instead of gathering it again (weft/torch/
layers.py). The backward of every layer multiplies by its weight through a view (weight.t()), never
a transposed copy.
"""

import torch

from . import plain
from .comm import world_size
from .layers import ColumnParallelLinear, RowParallelLinear


def _wide(x):
    """x in at least float32 (bf16 activations are normed and rotated in float32, float64 stays)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(torch.nn.Module):
    """x / rms(x) * weight over the last dimension, computed in at least float32."""

    def __init__(self, hidden, eps=1e-5, device=None, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        # On the current GPU unless told, as the parallel layers' weights are (layers.py).
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device if device is not None else torch.cuda.current_device(), dtype=dtype))

    def forward(self, x):
        wide = _wide(x)
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.to(wide.dtype)).to(x.dtype)


def rotary(x, theta):
    """Rotary position embedding of x [b, heads, s, head_dim] at positions 0 .. s-1 (the halves of
    each head rotated against each other, as Llama's reference code does), in at least float32."""
    s, d = x.shape[-2], x.shape[-1]
    wide = _wide(x)
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=wide.dtype) / d))
    angles = torch.outer(torch.arange(s, device=x.device, dtype=wide.dtype), inv)  # [s, d/2]
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    half = d // 2
    rotated = torch.cat((-wide[..., half:], wide[..., :half]), -1)
    return (wide * cos + rotated * sin).to(x.dtype)


class _Parallel(torch.nn.Module):
    """Runs a column- or row-parallel layer through weft (plain False), through plain.py with its
    weights (True), or through PyTorch AsyncTP's fused ops ("async_tp": sequence parallel, forward only)."""

    @staticmethod
    def column(layer, x, use_plain):
        if use_plain == "async_tp":
            _require_async_tp(layer)
            return plain.column_parallel_async_tp(x, layer.weight)
        return plain.column_parallel(x, layer.weight, layer.sequence_parallel) if use_plain else layer(x)

    @staticmethod
    def row(layer, y, use_plain):
        if use_plain == "async_tp":
            _require_async_tp(layer)
            return plain.row_parallel_async_tp(y, layer.weight)
        return plain.row_parallel(y, layer.weight, layer.sequence_parallel) if use_plain else layer(y)


def _require_async_tp(layer):
    if not layer.sequence_parallel or world_size() == 1:
        raise ValueError("plain='async_tp' needs sequence-parallel layers over several ranks (AsyncTP's fused ops gather and scatter rows)")
    if torch.is_grad_enabled():
        raise ValueError("plain='async_tp' runs forward only (torch.ops.symm_mem's fused ops have no backward): use torch.no_grad()")


class TensorParallelAttention(_Parallel):
    """Self-attention with the query, key and value projections column-parallel (one fused layer:
    each rank's rows are its q heads, then its k heads, then its v heads) and the output projection
    row-parallel."""

    def __init__(self, cfg, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16, save_gathered_input=False):
        super().__init__()
        world = world_size()
        local = cfg.per_rank(world)
        self.heads, self.kv_heads, self.head_dim, self.theta = local.heads, local.kv_heads, cfg.head_dim, cfg.rope_theta
        self.sequence_parallel = sequence_parallel
        self.qkv = ColumnParallelLinear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, sequence_parallel, strategy, device, dtype,
                                        save_gathered_input)
        self.out = RowParallelLinear(cfg.heads * cfg.head_dim, cfg.hidden, sequence_parallel, strategy, device, dtype)

    def forward(self, x, plain=False):
        s_here, b, hidden = x.shape
        qkv = self.column(self.qkv, x.reshape(s_here * b, hidden), plain)
        s = qkv.shape[0] // b  # the whole sequence after the gather (sequence parallel) or as given
        qkv = qkv.view(s, b, self.heads + 2 * self.kv_heads, self.head_dim).permute(1, 2, 0, 3)  # [b, h, s, d]
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=1)
        q, k = rotary(q, self.theta), rotary(k, self.theta)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v.contiguous(), is_causal=True, enable_gqa=self.kv_heads != self.heads)
        o = o.permute(2, 0, 1, 3).reshape(s * b, self.heads * self.head_dim)  # [s*b, heads*d], sequence-first
        z = self.row(self.out, o, plain)
        return z.view(-1, b, hidden)


class TensorParallelSwiGLU(_Parallel):
    """silu(x W_gate^T) * (x W_up^T) W_down^T: gate and up one column-parallel layer (each rank's rows:
    its gate rows, then its up rows), down row-parallel."""

    def __init__(self, cfg, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16, save_gathered_input=False):
        super().__init__()
        self.ffn_here = cfg.per_rank(world_size()).ffn
        self.gate_up = ColumnParallelLinear(cfg.hidden, 2 * cfg.ffn, sequence_parallel, strategy, device, dtype, save_gathered_input)
        self.down = RowParallelLinear(cfg.ffn, cfg.hidden, sequence_parallel, strategy, device, dtype)

    def forward(self, x, plain=False):
        s_here, b, hidden = x.shape
        gate, up = self.column(self.gate_up, x.reshape(s_here * b, hidden), plain).split(self.ffn_here, dim=-1)
        z = self.row(self.down, torch.nn.functional.silu(gate) * up, plain)
        return z.view(-1, b, hidden)


class MixtureOfExpertsMLP(torch.nn.Module):
    """The MLP of an MoE config: weft.torch.TensorParallelMoE (SwiGLU experts, tensor-parallel through
    ag_moe / moe_rs) on the block's [s/W, b, hidden] activations. Sequence parallel only (each rank's
    tokens its own); plain (True or "async_tp"): through torch."""

    def __init__(self, cfg, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16):
        super().__init__()
        from .moe import TensorParallelMoE

        if not sequence_parallel and world_size() > 1:
            raise ValueError(f"{cfg.name}: the MoE MLP runs with sequence parallelism (each rank's own tokens gathered by ag_moe)")
        self.moe = TensorParallelMoE(cfg.hidden, cfg.ffn, cfg.experts, cfg.topk, strategy, device, dtype)

    def forward(self, x, plain=False):
        s_here, b, hidden = x.shape
        return self.moe(x.reshape(s_here * b, hidden), plain_products=bool(plain)).view(-1, b, hidden)


class DecoderBlock(torch.nn.Module):
    """x + attention(norm(x)), then + mlp(norm(...)): one Llama-style layer (see the module's docstring)."""

    def __init__(self, cfg, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16, save_gathered_input=False):
        super().__init__()
        self.cfg = cfg
        self.attention_norm = RMSNorm(cfg.hidden, cfg.norm_eps, device, dtype)
        self.attention = TensorParallelAttention(cfg, sequence_parallel, strategy, device, dtype, save_gathered_input)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.norm_eps, device, dtype)
        self.mlp = (MixtureOfExpertsMLP(cfg, sequence_parallel, strategy, device, dtype) if cfg.is_moe
                    else TensorParallelSwiGLU(cfg, sequence_parallel, strategy, device, dtype, save_gathered_input))

    def forward(self, x, plain=False):
        h = x + self.attention(self.attention_norm(x), plain)
        return h + self.mlp(self.mlp_norm(h), plain)


class DecoderStack(torch.nn.Module):
    """`layers` DecoderBlocks of one config, random weights: the step benchmark's model."""

    def __init__(self, cfg, layers, sequence_parallel=True, strategy="default", device=None, dtype=torch.bfloat16, save_gathered_input=False):
        super().__init__()
        if layers < 1:
            raise ValueError(f"DecoderStack: layers={layers} must be at least 1")
        self.blocks = torch.nn.ModuleList(DecoderBlock(cfg, sequence_parallel, strategy, device, dtype, save_gathered_input) for _ in range(layers))

    def forward(self, x, plain=False):
        for block in self.blocks:
            x = block(x, plain)
        return x
