"""A torch.compile pass that puts weft's ops into an unmodified tensor-parallel model: after
``weft.torch.compile.enable()``, Inductor's post-grad graphs have

    all_gather(x) -> mm(., W^T)          replaced by  torch.ops.weft.ag_gemm(x, W)
    mm(a, W^T) -> reduce_scatter(sum)    replaced by  torch.ops.weft.gemm_rs(a, W)
    mm(a, W^T) -> all_reduce(sum)        replaced by  torch.ops.weft.gemm_ar(a, W)

where the collective is PyTorch's functional one (what DTensor's parallel styles and
torch.distributed._functional_collectives trace to) over the process group weft's communicator
spans, gathering or scattering along rows, and the product is bf16 and 2-D (a view between the
collective and the product, flattening leading dimensions, is followed). The strategy is `auto`
unless enable() is given one. Every rewrite is logged (logger "weft.torch.compile") and listed by
report(), and so is every near-match left as it was, with the reason: another dtype, a bias
(addmm), a weight not given as W^T, a gathered tensor another node also reads, a group weft does
not span, a shape weft's ops do not take. The pass adds ops, never graph breaks.

    import weft.torch, weft.torch.compile
    weft.torch.init()
    weft.torch.compile.enable()
    model = torch.compile(model)           # DTensor ColwiseParallel / RowwiseParallel / SequenceParallel
    print(weft.torch.compile.report())
"""

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("weft.torch.compile")

_c10d = torch.ops._c10d_functional
_aten = torch.ops.aten
_state = {"strategy": 0, "report": [], "previous": None}


@dataclass
class Finding:
    """One collective + product in a graph: rewritten into `op`, or left (`reason` says why)."""

    op: str
    node: str
    rewritten: bool
    reason: str = ""

    def __str__(self):
        return f"{self.op} at {self.node}: " + ("rewritten" if self.rewritten else f"left as it was ({self.reason})")


def report():
    """The findings of every graph the pass has seen since enable() (rewrites and near-matches)."""
    return list(_state["report"])


def _weft_group():
    """(world size, group name) of weft's communicator, or None before weft.torch.init()."""
    from . import comm

    if not comm.is_initialized():
        return None
    group = comm.process_group()
    name = group.group_name if group is not None else None
    return comm.world_size(), name


def _transposed_weight(node):
    """W where `node` is W^T of a 2-D W (aten.t, permute [1, 0], transpose 0 1), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target == _aten.t.default:
        return node.args[0]
    if node.target == _aten.permute.default and list(node.args[1]) == [1, 0]:
        return node.args[0]
    if node.target == _aten.transpose.int and sorted(int(d) % 2 for d in node.args[1:3]) == [0, 1]:
        return node.args[0]
    return None


def _value(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _through_flattening_view(node):
    """(the node a product reads, the views between): `node` itself, or its single-user 2-D view."""
    users = list(node.users)
    if len(users) == 1 and users[0].target in (_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default):
        view = users[0]
        val = _value(view)
        if val is not None and val.dim() == 2:
            return view, [view]
    return node, []


def _product_problem(mm, weight):
    """Why weft's op cannot take mm(a, weight^T) (None: it can)."""
    a, out = _value(mm.args[0]), _value(mm)
    w = _value(weight)
    if a is None or out is None or w is None:
        return "no shape metadata on the graph"
    if a.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        return f"dtype {a.dtype} x {w.dtype}; weft's ops take bfloat16"
    if w.dim() != 2:
        return f"the weight has {w.dim()} dimensions"
    n, k = w.shape
    if isinstance(n, int) and isinstance(k, int) and (n % 8 or k % 8):
        return f"n={n}, k={k}: weft's ops take multiples of 8"
    return None


def _collective_group(node, world_and_group):
    """Why weft cannot stand in for this collective's group (None: it can)."""
    if world_and_group is None:
        return "weft.torch.init() has not been called"
    world, name = world_and_group
    # all_gather_into_tensor(x, size, group), reduce_scatter_tensor(x, op, size, group), all_reduce(x, op, group)
    size = {_c10d.all_gather_into_tensor.default: 1, _c10d.reduce_scatter_tensor.default: 2}.get(node.target)
    size = node.args[size] if size is not None else None
    group = node.args[-1]
    if name is not None and str(group) != str(name):
        return f"a collective over group '{group}'; weft's communicator spans '{name}'"
    if size is not None and int(size) != world:
        return f"a collective over {size} ranks; weft's communicator has {world}"
    return None


def _insert(graph, before, op, args, like):
    with graph.inserting_before(before):
        node = graph.call_function(getattr(torch.ops.weft, op).default, args)
    node.meta.update({k: v for k, v in like.meta.items() if k in ("val", "tensor_meta", "stack_trace")})
    return node


def _erase_unused(graph, nodes):
    for node in nodes:
        if node.graph is graph and not node.users:
            graph.erase_node(node)


def _rewrite_all_gathers(graph, group, findings):
    for ag in [n for n in graph.nodes if n.target == _c10d.all_gather_into_tensor.default]:
        waits = [u for u in ag.users if u.target == _c10d.wait_tensor.default]
        if len(waits) != 1 or len(ag.users) != 1:
            continue
        wait = waits[0]
        read, views = _through_flattening_view(wait)
        mms = [u for u in read.users if u.target in (_aten.mm.default, _aten.addmm.default)]
        if not mms:
            continue
        mm = mms[0]
        where = mm.name
        if mm.target == _aten.addmm.default:
            findings.append(Finding("ag_gemm", where, False, "a bias (addmm): weft's ops add none"))
            continue
        if len(read.users) != 1 or (views and len(wait.users) != 1):
            findings.append(Finding("ag_gemm", where, False, "another node also reads the gathered tensor (weft's op does not return it)"))
            continue
        weight = _transposed_weight(mm.args[1])
        if mm.args[0] is not read or weight is None:
            findings.append(Finding("ag_gemm", where, False, "the product is not gather(x) @ W^T (the weight not given transposed)"))
            continue
        reason = _collective_group(ag, group) or _product_problem(mm, weight)
        shard = ag.args[0]
        if reason is None and _value(shard) is not None and _value(shard).dim() != 2 and not views:
            reason = f"the shard has {_value(shard).dim()} dimensions and no view flattens it"
        if reason:
            findings.append(Finding("ag_gemm", where, False, reason))
            continue
        with graph.inserting_before(mm):
            a = shard
            if views:  # gather(x).view(-1, k) == gather(x.view(-1, k)) for a gather along rows
                k = _value(mm.args[0]).shape[1]
                a = graph.call_function(_aten.reshape.default, (shard, [-1, k]))
        node = _insert(graph, mm, "ag_gemm", (a, weight, _state["strategy"]), mm)
        mm.replace_all_uses_with(node)
        _erase_unused(graph, [mm, mm.args[1], *reversed(views), wait, ag])
        findings.append(Finding("ag_gemm", node.name, True))


def _rewrite_reductions(graph, group, findings):
    kinds = {_c10d.reduce_scatter_tensor.default: "gemm_rs", _c10d.all_reduce.default: "gemm_ar"}
    for coll in [n for n in graph.nodes if n.target in kinds]:
        op = kinds[coll.target]
        source = coll.args[0]
        if not isinstance(source, torch.fx.Node):
            continue
        mm = source
        views = []
        if mm.target in (_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default) and isinstance(mm.args[0], torch.fx.Node):
            views, mm = [mm], mm.args[0]
        if mm.target not in (_aten.mm.default, _aten.addmm.default):
            continue
        where = mm.name
        if mm.target == _aten.addmm.default:
            findings.append(Finding(op, where, False, "a bias (addmm): weft's ops add none"))
            continue
        if str(coll.args[1]) != "sum":
            findings.append(Finding(op, where, False, f"a '{coll.args[1]}' reduction; weft's ops sum"))
            continue
        if views:
            findings.append(Finding(op, where, False, "a view between the product and the reduction"))
            continue
        if len(mm.users) != 1:
            findings.append(Finding(op, where, False, "another node also reads the product before its reduction"))
            continue
        waits = [u for u in coll.users if u.target == _c10d.wait_tensor.default]
        weight = _transposed_weight(mm.args[1])
        if len(waits) != 1 or len(coll.users) != 1:
            continue
        if weight is None:
            findings.append(Finding(op, where, False, "the product is not a @ W^T (the weight not given transposed)"))
            continue
        # (rows a multiple of the ranks, which gemm_rs needs, reduce_scatter_tensor needs too)
        reason = _collective_group(coll, group) or _product_problem(mm, weight)
        if reason:
            findings.append(Finding(op, where, False, reason))
            continue
        node = _insert(graph, coll, op, (mm.args[0], weight, _state["strategy"]), waits[0])
        waits[0].replace_all_uses_with(node)
        _erase_unused(graph, [waits[0], coll, mm, mm.args[1]])
        findings.append(Finding(op, node.name, True))


def rewrite(graph):
    """Rewrites the patterns in `graph` (an FX graph of ATen ops with shape metadata, as Inductor's
    post-grad passes see) in place; returns this graph's findings, also appended to report()."""
    group = _weft_group()
    findings = []
    _rewrite_all_gathers(graph, group, findings)
    _rewrite_reductions(graph, group, findings)
    graph.lint()
    for f in findings:
        (log.info if f.rewritten else log.warning)("weft.torch.compile: %s", f)
    _state["report"].extend(findings)
    return findings


class _Pass(torch._inductor.custom_graph_pass.CustomGraphPass):
    def __call__(self, graph):
        previous = _state["previous"]
        if previous is not None:
            previous(graph)
        rewrite(graph)

    def uuid(self):
        # The rewrite depends on the strategy and on weft's group, not only on this file.
        from torch._inductor.custom_graph_pass import get_hash_for_files

        return (get_hash_for_files((__file__,)), _state["strategy"], str(_weft_group()))


def enable(strategy="default"):
    """Switches the pass on for every later torch.compile (Inductor), with `strategy` for the ops it
    puts in; a pass already installed (post_grad_custom_pre_pass) runs first."""
    from .ops import strategy_id

    config = torch._inductor.config
    if not isinstance(config.post_grad_custom_pre_pass, _Pass):
        _state["previous"] = config.post_grad_custom_pre_pass
    _state["strategy"] = strategy_id(strategy)
    _state["report"] = []
    config.post_grad_custom_pre_pass = _Pass()


def disable():
    """Puts back the pass enable() found."""
    config = torch._inductor.config
    if isinstance(config.post_grad_custom_pre_pass, _Pass):
        config.post_grad_custom_pre_pass = _state["previous"]
    _state["previous"] = None


__all__ = ["Finding", "disable", "enable", "report", "rewrite"]
