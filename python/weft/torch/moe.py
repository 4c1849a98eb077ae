"""Tensor-parallel mixture of experts with autograd (TileLink Figure 5): every rank holds a shard of
every expert (w1: [experts * ffn / W, hidden], or with SwiGLU experts [experts * 2 ffn / W, hidden],
each expert's gate rows then its up rows; w2: [experts * hidden, ffn / W]) and, with sequence
parallelism, its own tokens x [t, hidden].

    moe = weft.torch.TensorParallelMoE(hidden=4096, ffn=14336, experts=8, topk=2)
    z = moe(x)     # x [t, hidden]: this rank's tokens -> z [t, hidden]

Forward: a router (replicated [experts, hidden]) picks each token's top-k experts and their weights
(softmax over the experts, renormalised over the chosen); the ids go to the ops as they are, on the
GPU (routing="ids", the default: no host synchronisation, graph-safe; the op gathers them and routes
the rows on the device), or every rank's are gathered to the host first (routing="table": the ops'
host-table path, a synchronisation per call); then torch.ops.weft.ag_moe
(AllGather of the tokens + each (token, choice) row times its expert's w1 shard), the activation
(SwiGLU: silu(gate) * up, Mixtral's; or GELU), and
torch.ops.weft.moe_rs (each row times its expert's w2 shard, the weighted top-k combine, and the
ReduceScatter back to the tokens' ranks). Backward: not overlapped yet: the same products per expert
with torch (a torch.mm per expert; with grouped_backward=True one torch._grouped_mm over every expert,
which measured slower in the model step: bench/results), in weft/torch/plain.py's MoE row layout,
the tokens (and with routing="ids" every rank's ids, on the GPU) gathered again, the input gradient
reduce-scattered. The same layer in plain torch: plain.ag_moe / plain.moe_rs under autograd.
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


def _every_ranks(choices, ids):
    """The ops' choices as a table of every rank's, [W, rows * topk]: this rank's ids [rows, topk]
    (ids: routing="ids") gathered on their device; a host table as it is."""
    return every_ranks_ids(choices) if ids else choices


class _AgMoe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w1, choices, ids, experts, strategy, grouped_backward):
        x = x.contiguous()
        ctx.save_for_backward(x, w1)
        ctx.choices, ctx.ids, ctx.experts, ctx.grouped_backward = choices, ids, experts, grouped_backward
        return ag_moe(x, w1, choices, experts, strategy)

    @staticmethod
    def backward(ctx, dh):
        x, w1 = ctx.saved_tensors
        experts = ctx.experts
        topk = ctx.choices.shape[1] if ctx.ids else ctx.choices.shape[1] // x.shape[0]
        choices = _every_ranks(ctx.choices, ctx.ids)
        gathered = all_gather_rows(x)
        dh = dh.contiguous()
        grouped = _grouped(choices, topk, experts, x.device, ctx.grouped_backward)
        if grouped is not None:
            order, by_expert = grouped
            try:
                tokens = order // topk
                dx_all = torch.zeros_like(gathered, dtype=torch.float32).index_add_(0, tokens, by_expert.products_t(dh, w1).float())
                dw1 = by_expert.weight_gradients(dh, gathered[tokens])
                return reduce_scatter_rows(dx_all.to(x.dtype)), dw1, None, None, None, None, None
            except RuntimeError as e:
                _grouped_failure(e)
        tokens, _, rows_of = _rows_by_expert(choices, topk, experts, x.device)
        n = w1.shape[0] // experts
        dx_all, dw1 = torch.zeros_like(gathered, dtype=torch.float32), torch.empty_like(w1)
        for e, rows in enumerate(rows_of):
            w = w1[e * n:(e + 1) * n]
            if rows.numel():
                dx_all.index_add_(0, tokens[rows], torch.mm(dh[rows], w).float())
                dw1[e * n:(e + 1) * n] = torch.mm(dh[rows].t(), gathered[tokens[rows]])
            else:
                dw1[e * n:(e + 1) * n] = 0
        return reduce_scatter_rows(dx_all.to(x.dtype)), dw1, None, None, None, None, None


class _MoeRs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w2, choices, ids, topk_weights, experts, strategy, grouped_backward):
        h = h.contiguous()
        ctx.save_for_backward(h, w2, topk_weights)
        ctx.choices, ctx.ids, ctx.experts, ctx.grouped_backward = choices, ids, experts, grouped_backward
        return moe_rs(h, w2, choices, topk_weights, experts, strategy)

    @staticmethod
    def backward(ctx, dz):
        h, w2, weights = ctx.saved_tensors
        experts, topk = ctx.experts, weights.shape[1]
        choices = _every_ranks(ctx.choices, ctx.ids)
        dz_all = all_gather_rows(dz.contiguous())
        grouped = _grouped(choices, topk, experts, h.device, ctx.grouped_backward)
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
                return dh, dw2, None, None, dweights.to(weights.dtype), None, None, None
            except RuntimeError as e:
                _grouped_failure(e)
        tokens, choice, rows_of = _rows_by_expert(choices, topk, experts, h.device)
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
        return dh, dw2, None, None, dweights.to(weights.dtype), None, None, None


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


def routing_gap(hidden, w1_rows, ffn_here, experts, topk, strategy="default"):
    """Why the layer's two products (ag_moe: N = w1_rows per expert, K = hidden; moe_rs: N = hidden,
    K = ffn_here, the rank's share of the inner dimension) cannot take the router's ids on the GPU;
    "" where both can."""
    from .. import _native

    for op, n, k in (("ag_moe", w1_rows, hidden), ("moe_rs", hidden, ffn_here)):
        gap = _native.device_routing_gap(op, n, k, experts, topk, world_size(), strategy)
        if gap:
            return gap
    return ""


def every_ranks_ids(ids):
    """Every rank's experts per token, [W, t * topk] int32, where ids are (the GPU: no host sync)."""
    return all_gather_rows(ids.to(torch.int32).contiguous()).reshape(world_size(), -1)


def every_ranks_choices(ids):
    """Every rank's experts per token, [W, t * topk], on the host (the MoE ops' table)."""
    return every_ranks_ids(ids).cpu()


class TensorParallelMoE(torch.nn.Module):
    """z = sum over each token's top-k experts e of weight_e * act(x W1_e^T) W2_e^T, experts sharded
    over ranks along their inner dimension (see the module); activation "swiglu" (W1_e holds the gate
    and up projections: silu(gate) * up) or "gelu". plain_products=True runs the same layer through
    torch (plain.ag_moe / plain.moe_rs): the reference. routing: "ids" (the router's ids to the ops
    on the GPU), "table" (every rank's gathered to the host), or None: "ids" where the strategy and
    both products' shapes take them (routing_gap), else "table"."""

    def __init__(self, hidden, ffn, experts, topk=2, strategy="default", device=None, dtype=torch.bfloat16, activation="swiglu",
                 grouped_backward=False, routing=None):
        super().__init__()
        world = world_size()
        if ffn % world:
            raise ValueError(f"TensorParallelMoE: ffn={ffn} is not a multiple of the world size {world}")
        if not 1 <= topk <= experts:
            raise ValueError(f"TensorParallelMoE: topk={topk} must be in 1..experts={experts}")
        if activation not in ("swiglu", "gelu"):
            raise ValueError(f"TensorParallelMoE: activation must be 'swiglu' or 'gelu', got {activation!r}")
        if routing not in (None, "ids", "table"):
            raise ValueError(f"TensorParallelMoE: routing must be 'ids', 'table' or None, got {routing!r}")
        gap = routing_gap(hidden, ffn // world * (2 if activation == "swiglu" else 1), ffn // world, experts, topk, strategy)
        if routing == "ids" and gap:
            raise ValueError(f"TensorParallelMoE: routing='ids' is not taken here: {gap}")
        self.routing = routing or ("table" if gap else "ids")
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
        weights_all = plain._all_gather(weights)  # autograd: the weights' gradient reduce-scattered back
        if plain_products:
            choices = every_ranks_ids(ids)
            h = plain.ag_moe(x, self.w1, choices, self.experts)
            return plain.moe_rs(self._act(h), self.w2, choices, weights_all, self.experts)
        by_ids = self.routing == "ids"
        choices = ids.to(torch.int32).contiguous() if by_ids else every_ranks_choices(ids)
        h = _AgMoe.apply(x, self.w1, choices, by_ids, self.experts, self.strategy, self.grouped_backward)
        return _MoeRs.apply(self._act(h), self.w2, choices, by_ids, weights_all, self.experts, self.strategy, self.grouped_backward)

    def _act(self, h):
        if self.activation == "gelu":
            return torch.nn.functional.gelu(h)
        gate, up = h.split(self.ffn_here, dim=-1)
        return torch.nn.functional.silu(gate) * up
