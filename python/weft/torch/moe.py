"""Tensor-parallel mixture of experts with autograd (TileLink Figure 5): every rank holds a shard of
every expert (w1: [experts * ffn / W, hidden], or with SwiGLU experts [experts * 2 ffn / W, hidden],
each expert's gate rows then its up rows; w2: [experts * hidden, ffn / W]) and, with sequence
parallelism, its own tokens x [t, hidden].

    moe = weft.torch.TensorParallelMoE(hidden=4096, ffn=14336, experts=8, topk=2)
    z = moe(x)     # x [t, hidden]: this rank's tokens -> z [t, hidden]

Forward: a router (replicated [experts, hidden]) picks each token's top-k experts and their weights
(softmax over the experts, renormalised over the chosen), every rank's choices gathered (a host
synchronisation: weft's MoE ops take the choices as a host table), then torch.ops.weft.ag_moe
(AllGather of the tokens + each (token, choice) row times its expert's w1 shard), the activation
(SwiGLU: silu(gate) * up, Mixtral's; or GELU), and
torch.ops.weft.moe_rs (each row times its expert's w2 shard, the weighted top-k combine, and the
ReduceScatter back to the tokens' ranks). Backward: not overlapped yet: the same products per expert
with torch (a torch.mm per expert; with grouped_backward=True one torch._grouped_mm over every expert,
which measured slower in the model step: bench/results), in weft/torch/plain.py's MoE row layout,
the tokens gathered again, the input gradient reduce-scattered. The same layer in plain torch: plain.ag_moe / plain.moe_rs under autograd.
bfloat16."""

import torch

from . import plain
from .comm import all_gather_rows, process_group, reduce_scatter_rows, world_size
from .layers import _init_weight
from .ops import ag_moe, moe_rs


def _rows_by_expert(choices, topk, experts, device):
    """For the MoE row layout: each row's token (over every rank) and choice, and per expert its rows."""
    order = plain.moe_row_order(choices, topk).to(device)
    expert_of = choices.reshape(-1).long().to(device)[order]
    return order // topk, order % topk, [(expert_of == e).nonzero().squeeze(1) for e in range(experts)]


_grouped_failed = []  # the first error of torch._grouped_mm here, after which the loop runs


def _grouped(choices, topk, experts, device, wanted):
    """(the MoE row layout's order, a plain.ByExpert) where the grouped backward is wanted,
    torch._grouped_mm is there and has not failed in this process; else None, with nothing computed
    (the loop over experts finds its own rows)."""
    if not wanted or _grouped_failed or not plain.has_grouped_mm():
        return None
    order = plain.moe_row_order(choices, topk).to(device)
    return order, plain.ByExpert(choices.reshape(-1).long().to(device)[order], experts)


def _grouped_failure(e):
    import warnings

    _grouped_failed.append(e)
    warnings.warn(f"weft.torch.moe: torch._grouped_mm failed ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                  "the MoE backward runs a torch.mm per expert from now on", RuntimeWarning, stacklevel=3)


class _AgMoe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w1, choices, experts, strategy, grouped_backward):
        x = x.contiguous()
        ctx.save_for_backward(x, w1)
        ctx.choices, ctx.experts, ctx.grouped_backward = choices, experts, grouped_backward
        return ag_moe(x, w1, choices, experts, strategy)

    @staticmethod
    def backward(ctx, dh):
        x, w1 = ctx.saved_tensors
        experts, topk = ctx.experts, ctx.choices.shape[1] // x.shape[0]
        gathered = all_gather_rows(x)
        dh = dh.contiguous()
        grouped = _grouped(ctx.choices, topk, experts, x.device, ctx.grouped_backward)
        if grouped is not None:
            order, by_expert = grouped
            try:
                tokens = order // topk
                dx_all = torch.zeros_like(gathered, dtype=torch.float32).index_add_(0, tokens, by_expert.products_t(dh, w1).float())
                dw1 = by_expert.weight_gradients(dh, gathered[tokens])
                return reduce_scatter_rows(dx_all.to(x.dtype)), dw1, None, None, None, None
            except RuntimeError as e:
                _grouped_failure(e)
        tokens, _, rows_of = _rows_by_expert(ctx.choices, topk, experts, x.device)
        n = w1.shape[0] // experts
        dx_all, dw1 = torch.zeros_like(gathered, dtype=torch.float32), torch.empty_like(w1)
        for e, rows in enumerate(rows_of):
            w = w1[e * n:(e + 1) * n]
            if rows.numel():
                dx_all.index_add_(0, tokens[rows], torch.mm(dh[rows], w).float())
                dw1[e * n:(e + 1) * n] = torch.mm(dh[rows].t(), gathered[tokens[rows]])
            else:
                dw1[e * n:(e + 1) * n] = 0
        return reduce_scatter_rows(dx_all.to(x.dtype)), dw1, None, None, None, None


class _MoeRs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w2, choices, topk_weights, experts, strategy, grouped_backward):
        h = h.contiguous()
        ctx.save_for_backward(h, w2, topk_weights)
        ctx.choices, ctx.experts, ctx.grouped_backward = choices, experts, grouped_backward
        return moe_rs(h, w2, choices, topk_weights, experts, strategy)

    @staticmethod
    def backward(ctx, dz):
        h, w2, weights = ctx.saved_tensors
        experts, topk = ctx.experts, weights.shape[1]
        dz_all = all_gather_rows(dz.contiguous())
        grouped = _grouped(ctx.choices, topk, experts, h.device, ctx.grouped_backward)
        if grouped is not None:
            order, by_expert = grouped
            try:
                t, j = order // topk, order % topk
                g = dz_all[t]  # each row's token's output gradient
                scaled = (g.float() * weights[t, j].float().unsqueeze(1)).to(h.dtype)
                dh = by_expert.products_t(scaled, w2)
                dw2 = by_expert.weight_gradients(scaled, h)
                # This rank's share of each weight's gradient (see the loop below).
                dweights = torch.zeros(weights.shape, dtype=torch.float32, device=h.device)
                dweights[t, j] = (g.float() * by_expert.products(h, w2).float()).sum(1)
                return dh, dw2, None, dweights.to(weights.dtype), None, None, None
            except RuntimeError as e:
                _grouped_failure(e)
        tokens, choice, rows_of = _rows_by_expert(ctx.choices, topk, experts, h.device)
        n = w2.shape[0] // experts
        dh, dw2 = torch.empty_like(h), torch.empty_like(w2)
        # This rank's share of each weight's gradient: its rows' partial products (over its shard of
        # the inner dimension); the all-gather that made topk_weights sums the ranks' shares.
        dweights = torch.zeros(weights.shape, dtype=torch.float32, device=h.device)
        for e, rows in enumerate(rows_of):
            w = w2[e * n:(e + 1) * n]
            if not rows.numel():
                dw2[e * n:(e + 1) * n] = 0
                continue
            t, j = tokens[rows], choice[rows]
            g = dz_all[t]                                   # each row's token's output gradient
            scaled = (g.float() * weights[t, j].float().unsqueeze(1)).to(h.dtype)
            dh[rows] = torch.mm(scaled, w)
            dw2[e * n:(e + 1) * n] = torch.mm(scaled.t(), h[rows])
            dweights[t, j] = (g.float() * torch.mm(h[rows], w.t()).float()).sum(1)
        return dh, dw2, None, dweights.to(weights.dtype), None, None, None


def route(x, gate, topk, ids=None):
    """Each token's top-k experts and their weights (softmax over the experts, renormalised over the
    chosen): (ids [t, topk], weights [t, topk] in x's dtype, differentiable through gate and x).
    Given `ids`, those experts instead of the top-k (their weights still from x and gate)."""
    probabilities = torch.softmax(torch.mm(x, gate.t()).to(torch.promote_types(x.dtype, torch.float32)), dim=-1)
    if ids is None:
        values, ids = torch.topk(probabilities, topk, dim=-1)
    else:
        values = probabilities.gather(-1, ids)
    return ids, (values / values.sum(-1, keepdim=True)).to(x.dtype)


def every_ranks_choices(ids):
    """Every rank's experts per token, [W, t * topk], on the host (the MoE ops' table)."""
    return all_gather_rows(ids.to(torch.int32).contiguous()).reshape(world_size(), -1).cpu()


class TensorParallelMoE(torch.nn.Module):
    """z = sum over each token's top-k experts e of weight_e * act(x W1_e^T) W2_e^T, experts sharded
    over ranks along their inner dimension (see the module); activation "swiglu" (W1_e holds the gate
    and up projections: silu(gate) * up) or "gelu". plain_products=True runs the same layer through
    torch (plain.ag_moe / plain.moe_rs): the reference."""

    def __init__(self, hidden, ffn, experts, topk=2, strategy="default", device=None, dtype=torch.bfloat16, activation="swiglu",
                 grouped_backward=False):
        super().__init__()
        world = world_size()
        if ffn % world:
            raise ValueError(f"TensorParallelMoE: ffn={ffn} is not a multiple of the world size {world}")
        if not 1 <= topk <= experts:
            raise ValueError(f"TensorParallelMoE: topk={topk} must be in 1..experts={experts}")
        if activation not in ("swiglu", "gelu"):
            raise ValueError(f"TensorParallelMoE: activation must be 'swiglu' or 'gelu', got {activation!r}")
        device = device or torch.cuda.current_device()
        self.experts, self.topk, self.strategy, self.activation = experts, topk, strategy, activation
        self.grouped_backward = grouped_backward  # the backward through torch._grouped_mm (see the module)
        self.ffn_here = ffn // world
        self.gate = _init_weight(experts, hidden, device, dtype)
        if world > 1:  # the router is replicated: every rank starts from rank 0's
            torch.distributed.broadcast(self.gate.data, src=torch.distributed.get_global_rank(process_group(), 0), group=process_group())
        self.w1 = _init_weight(experts * (ffn // world) * (2 if activation == "swiglu" else 1), hidden, device, dtype)
        self.w2 = _init_weight(experts * hidden, ffn // world, device, dtype)
        # Verification through two paths (weft's ops and plain torch): the top-k of a router is
        # discontinuous, so two passes whose activations differ in the last bf16 bit pick other
        # experts for near-tied tokens, and their results differ by far more than either's rounding.
        # fixed_ids, where set ([t, topk]), replaces the router's choice; last_ids is the last pass's.
        self.fixed_ids = None
        self.last_ids = None

    def forward(self, x, plain_products=False):
        ids, weights = route(x, self.gate, self.topk, self.fixed_ids)
        self.last_ids = ids
        choices = every_ranks_choices(ids)
        weights_all = plain._all_gather(weights)  # autograd: the weights' gradient reduce-scattered back
        if plain_products:
            h = plain.ag_moe(x, self.w1, choices, self.experts)
            return plain.moe_rs(self._act(h), self.w2, choices, weights_all, self.experts)
        h = _AgMoe.apply(x, self.w1, choices, self.experts, self.strategy, self.grouped_backward)
        return _MoeRs.apply(self._act(h), self.w2, choices, weights_all, self.experts, self.strategy, self.grouped_backward)

    def _act(self, h):
        if self.activation == "gelu":
            return torch.nn.functional.gelu(h)
        gate, up = h.split(self.ffn_here, dim=-1)
        return torch.nn.functional.silu(gate) * up
