"""Sequence-parallel attention with autograd: each rank holds a contiguous block of the sequence's
tokens (rank r: tokens r * t .. (r + 1) * t - 1) and attends with its queries to every rank's keys and
values.

    attn = weft.torch.SequenceParallelAttention(causal=True)
    o = attn(q, k, v)     # q [t, (batch,) heads, d], k and v [t, (batch,) kv_heads, d]: this rank's tokens

Forward: torch.ops.weft.ag_attention (weft/torch/ops.py): the keys' and values' all-gather overlapped
with the attention by the strategy (sequential: all_gather then the kernel; decomposed: RingAttention's
schedule; tilelink: one kernel whose key/value tiles wait for their pulls; auto: weft's model picks).
Backward: not overlapped yet: k and v gathered by torch.distributed, the gradient of the same
attention through the installed torch's scaled_dot_product_attention (weft/torch/plain.py's
attention_over_gathered, recomputed), and the keys' and values' gradients reduce-scattered back to the
ranks that hold them. The same layer in plain torch: plain.sequence_parallel_attention, which is what
strategy "default" runs, forward and backward (SDPA's own backward, nothing recomputed), while weft's
kernel is slower than SDPA's (weft.torch.ops.attention_default_is_plain). bfloat16; head_dim 64 or 128."""

import torch

from . import plain
from .comm import all_gather_rows, process_group, reduce_scatter_rows, world_size
from .ops import ag_attention, attention_default_is_plain


def _rank():
    return torch.distributed.get_rank(process_group()) if world_size() > 1 else 0


class _AgAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, strategy):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        ctx.causal = causal
        ctx.save_for_backward(q, k, v)
        return ag_attention(q, k, v, causal, strategy)

    @staticmethod
    def backward(ctx, do):
        q, k, v = ctx.saved_tensors
        k_all, v_all = all_gather_rows(k), all_gather_rows(v)
        with torch.enable_grad():
            qd, kd, vd = (x.detach().requires_grad_() for x in (q, k_all, v_all))
            o = plain.attention_over_gathered(qd, kd, vd, ctx.causal, _rank())
            dq, dk_all, dv_all = torch.autograd.grad(o, (qd, kd, vd), do)
        return dq, reduce_scatter_rows(dk_all), reduce_scatter_rows(dv_all), None, None


class SequenceParallelAttention(torch.nn.Module):
    """o = softmax(q K^T / sqrt(d)) V over every rank's keys and values (see the module), forward
    through weft, backward through torch's SDPA; `strategy` as weft's ops take it ("default": plain
    torch, forward and backward)."""

    def __init__(self, causal=False, strategy="default"):
        super().__init__()
        self.causal, self.strategy = causal, strategy

    def forward(self, q, k, v):
        if attention_default_is_plain(self.strategy):
            return plain.sequence_parallel_attention(q, k, v, self.causal)
        return _AgAttention.apply(q, k, v, self.causal, self.strategy)
