"""A torch.compile pass that puts weft's ops into an unmodified tensor-parallel model: after
``weft.torch.compile.enable()``, Inductor's post-grad graphs have

    all_gather(x) -> mm(., B^T)          replaced by  torch.ops.weft.ag_gemm(x, B)
    mm(a, B^T) -> reduce_scatter(sum)    replaced by  torch.ops.weft.gemm_rs(a, B)
    mm(a, B^T) -> all_reduce(sum)        replaced by  torch.ops.weft.gemm_ar(a, B)

where the collective is PyTorch's functional one (what DTensor's parallel styles and
torch.distributed._functional_collectives trace to) over the process group weft's communicator
spans, gathering or scattering along rows, and the product is bf16 and 2-D (a view between the
collective and the product, flattening leading dimensions, is followed). B is passed as it lies, in
either layout the ops read (ops.py): a linear layer's weight W [n, k] where the product is x @ W^T,
or W.t(), a view with strides (1, n), where the product is x @ W of a plain [k, n] W (a backward's
dy @ W): nothing is copied. Where the gathered tensor has other readers (training keeps it for the
weight gradient; q, k and v projections share one gather), the product becomes
torch.ops.weft.ag_gemm_gathered, and the other readers, products included, read the gathered input
it hands back: one gather, inside the op. The strategy is `auto` unless enable() is given one.

Every rewrite is logged (logger "weft.torch.compile") and listed by report(), with how B is passed
and who reads the gathered input; so is every near-match left as it was, with the reason: another
dtype, a bias (addmm), a weight whose strides neither layout has, the gathered tensor as a product's
right operand, a second product of one gather, a group weft does not span, a shape weft's ops do
not take. The pass adds ops, never graph breaks.

    import weft.torch, weft.torch.compile
    weft.torch.init()
    weft.torch.compile.enable()
    model = torch.compile(model)           # DTensor ColwiseParallel / RowwiseParallel / SequenceParallel
    print(weft.torch.compile.report())
"""

import logging
import operator
from dataclasses import dataclass

import torch

log = logging.getLogger("weft.torch.compile")

_c10d = torch.ops._c10d_functional
_aten = torch.ops.aten
_state = {"strategy": 0, "report": [], "previous": None}


@dataclass
class Finding:
    """One collective + product in a graph: rewritten into `op` (`note` says how B is passed and
    where the gathered input goes), or left (`reason` says why)."""

    op: str
    node: str
    rewritten: bool
    reason: str = ""
    note: str = ""

    def __str__(self):
        if self.rewritten:
            return f"{self.op} at {self.node}: rewritten" + (f" ({self.note})" if self.note else "")
        return f"{self.op} at {self.node}: left as it was ({self.reason})"


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


_VIEWS = (_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default)


def _transposed(node):
    """X where `node` is X^T of a 2-D X (aten.t, permute [1, 0], transpose 0 1), else None."""
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


def _b_layout(b):
    """How weft's ops read B [n, k] with these strides (python/src/torch_ops.cpp's b_operand_layout):
    'nk' (row-major, strides (k, 1)), 'kn' (X.t() of a contiguous X [k, n], strides (1, n)), or None
    (a view they refuse)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    (n, k), (sn, sk) = b.shape, b.stride()
    if (known(k <= 1) or known(sk == 1)) and (known(n <= 1) or known(sn == k)):
        return "nk"
    if (known(n <= 1) or known(sn == 1)) and (known(k <= 1) or known(sk == n)):
        return "kn"
    return None


@dataclass
class _Weight:
    """B [n, k] of a product a @ rhs, rhs being B^T: `node` where the graph holds B (rhs = W^T: the
    linear layer's weight W), else None, and B is rhs.permute(1, 0), a view the pass puts in (rhs is
    a plain [k, n] tensor, as in a backward's dy @ W); `val` is B's shape metadata."""

    rhs: torch.fx.Node
    node: object
    val: object

    def operand(self, graph):
        """B as a node (a view made at the graph's insertion point where the graph has no B)."""
        if self.node is not None:
            return self.node
        node = graph.call_function(_aten.permute.default, (self.rhs, [1, 0]))
        node.meta["val"] = self.val
        return node

    def note(self):
        layout = _b_layout(self.val)
        how = "the weight as the graph holds it" if self.node is not None else f"{self.rhs.name}.t(), a view"
        return f"B {layout}: {how}, not copied"


def _weight(rhs):
    w = _transposed(rhs)
    if w is not None:
        return _Weight(rhs, w, _value(w))
    val = _value(rhs)
    return _Weight(rhs, None, val.permute(1, 0) if val is not None and val.dim() == 2 else None)


def _product_problem(mm, weight):
    """Why weft's op cannot take mm(a, B^T) (None: it can)."""
    a, out, b = _value(mm.args[0]), _value(mm), weight.val
    if a is None or out is None or b is None:
        return "no shape metadata on the graph"
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        return f"dtype {a.dtype} x {b.dtype}; weft's ops take bfloat16"
    if b.dim() != 2:
        return f"the weight has {b.dim()} dimensions"
    n, k = b.shape
    if isinstance(n, int) and isinstance(k, int) and (n % 8 or k % 8):
        return f"n={n}, k={k}: weft's ops take multiples of 8"
    if _b_layout(b) is None:
        return (f"the weight B [{n}, {k}] (the product's right operand, transposed) has strides {tuple(b.stride())}; "
                "weft's ops read B with strides (k, 1) or (1, n) and copy nothing")
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


def _call(graph, target, args, val, like=None):
    """A node of `target` at the graph's insertion point, with the shape metadata `val`. An op node
    also gets the layouts it takes as Inductor's layout constraint (eager_input_vals): A row-major
    contiguous (Inductor copies it only where the graph has it otherwise), B as given."""
    node = graph.call_function(target, args)
    if val is not None:
        node.meta["val"] = val
    if like is not None and "stack_trace" in like.meta:
        node.meta["stack_trace"] = like.meta["stack_trace"]
    a, b = (_value(x) for x in args[:2])
    if getattr(target, "namespace", None) == "weft" and a is not None and b is not None:
        node.meta["eager_input_vals"] = ((a.contiguous(), b, *args[2:]), {})
    return node


def _erase_unused(graph, nodes):
    for node in nodes:
        if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.graph is graph and not node.users:
            graph.erase_node(node)


def _depends_on(node, ancestor):
    """Whether `node` is computed from `ancestor`."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n is ancestor:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return False


def _left_products(read):
    """The products that take `read` as their left operand: mm(read, .), addmm(bias, read, .)."""
    return [u for u in read.users if (u.target == _aten.mm.default and u.args[0] is read) or (u.target == _aten.addmm.default and u.args[1] is read)]


def _gathered_read(wait):
    """(read, views): the 2-D tensor products read the gathered tensor as, the wait itself or a
    flattening view of it, whichever a product takes as its left operand first; (None, []) if none."""
    val = _value(wait)
    candidates = [(wait, [])] if val is not None and val.dim() == 2 else []
    candidates += [(u, [u]) for u in wait.users if u.target in _VIEWS and _value(u) is not None and _value(u).dim() == 2]
    for read, views in candidates:
        if _left_products(read):
            return read, views
    return None, []


def _gathered_product_problem(mm, ag, wait, views, group):
    """Why weft's ag_gemm cannot take this product of the gathered tensor (None: it can)."""
    if mm.target == _aten.addmm.default:
        return "a bias (addmm): weft's ops add none"
    weight = _weight(mm.args[1])
    reason = _collective_group(ag, group) or _product_problem(mm, weight)
    if reason:
        return reason
    shard = _value(ag.args[0])
    if shard is not None and shard.dim() != 2 and not views:
        return f"the shard has {shard.dim()} dimensions and no view flattens it"
    k = _value(mm.args[0]).shape[1]
    if views and shard is not None and isinstance(shard.numel(), int) and isinstance(k, int) and shard.numel() % k:
        return f"a view into rows of {k} that straddle the ranks' shards"
    if _depends_on(mm.args[1], wait):
        return "the weight is computed from the gathered tensor"
    return None


def _rewrite_all_gathers(graph, group, findings):
    for ag in [n for n in graph.nodes if n.target == _c10d.all_gather_into_tensor.default]:
        waits = [u for u in ag.users if u.target == _c10d.wait_tensor.default]
        if len(waits) != 1 or len(ag.users) != 1:
            continue
        wait = waits[0]
        read, views = _gathered_read(wait)
        if read is None:
            for tensor in [wait, *(u for u in wait.users if u.target in _VIEWS)]:
                findings.extend(Finding("ag_gemm", u.name, False, "the gathered tensor is the product's right operand; ag_gemm gathers the left")
                                for u in tensor.users if u.target == _aten.mm.default and u.args[1] is tensor)
            continue
        order = {n: i for i, n in enumerate(graph.nodes)}
        products = sorted(_left_products(read), key=order.get)
        problems = {p: _gathered_product_problem(p, ag, wait, views, group) for p in products}
        chosen = next((p for p in products if problems[p] is None), None)
        findings.extend(Finding("ag_gemm", p.name, False, problems[p]) for p in products if problems[p])
        if chosen is None:
            continue
        # Every other reader of the gathered tensor (products included) reads the gathered input
        # ag_gemm_gathered hands back: the gather happens once, inside the op.
        wait_readers = [u for u in wait.users if u is not read] if views else []
        readers = [u for u in read.users if u is not chosen] + wait_readers
        unflattened = list(_value(wait).shape)
        if wait_readers and not all(isinstance(d, int) for d in unflattened):
            findings.append(Finding("ag_gemm", chosen.name, False, "another node reads the gathered tensor unflattened, and its shape is dynamic"))
            continue
        weight = _weight(chosen.args[1])
        shard = ag.args[0]
        with graph.inserting_before(min([chosen, *readers], key=order.get)):
            a = shard
            if views:  # gather(x).view(-1, k) == gather(x.view(-1, k)) for a gather along rows
                k = _value(read).shape[1]
                a = _call(graph, _aten.reshape.default, (shard, [-1, k]), _value(shard).reshape(-1, k))
            b = weight.operand(graph)
            sid = _state["strategy"]
            if not readers:
                node = _call(graph, torch.ops.weft.ag_gemm.default, (a, b, sid), _value(chosen), chosen)
                result, note = node, weight.note()
            else:
                node = _call(graph, torch.ops.weft.ag_gemm_gathered.default, (a, b, sid), (_value(chosen), _value(read)), chosen)
                result = _call(graph, operator.getitem, (node, 0), _value(chosen))
                gathered = _call(graph, operator.getitem, (node, 1), _value(read))
                for reader in read.users.copy():
                    if reader is not chosen:
                        reader.replace_input_with(read, gathered)
                if wait_readers:
                    whole = _call(graph, _aten.view.default, (gathered, unflattened), _value(wait))
                    for reader in wait_readers:
                        reader.replace_input_with(wait, whole)
                names = ", ".join(r.name for r in readers)
                note = f"{weight.note()}; the gathered input it hands back goes to {names}"
        chosen.replace_all_uses_with(result)
        _erase_unused(graph, [chosen, chosen.args[1], *reversed(views), wait, ag])
        findings.append(Finding(str(node.target).split(".")[1], node.name, True, note=note))
        for p in products:
            if p is not chosen and problems[p] is None:
                findings.append(Finding("ag_gemm", p.name, False, f"it reads the gathered input {node.name} hands back (one product per gather: weft's op overlaps the gather with one)"))


def _rewrite_reductions(graph, group, findings):
    kinds = {_c10d.reduce_scatter_tensor.default: "gemm_rs", _c10d.all_reduce.default: "gemm_ar"}
    for coll in [n for n in graph.nodes if n.target in kinds]:
        op = kinds[coll.target]
        source = coll.args[0]
        if not isinstance(source, torch.fx.Node):
            continue
        mm = source
        views = []
        if mm.target in _VIEWS and isinstance(mm.args[0], torch.fx.Node):
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
        if len(waits) != 1 or len(coll.users) != 1:
            continue
        # (rows a multiple of the ranks, which gemm_rs needs, reduce_scatter_tensor needs too)
        weight = _weight(mm.args[1])
        reason = _collective_group(coll, group) or _product_problem(mm, weight)
        if reason:
            findings.append(Finding(op, where, False, reason))
            continue
        with graph.inserting_before(coll):
            node = _call(graph, getattr(torch.ops.weft, op).default, (mm.args[0], weight.operand(graph), _state["strategy"]), _value(waits[0]), waits[0])
        waits[0].replace_all_uses_with(node)
        _erase_unused(graph, [waits[0], coll, mm, mm.args[1]])
        findings.append(Finding(op, node.name, True, note=weight.note()))


def rewrite(graph):
    """Rewrites the patterns in `graph` (an FX graph of ATen ops with shape metadata, as Inductor's
    post-grad passes see) in place; returns this graph's findings, also appended to report()."""
    group = _weft_group()
    findings = []
    _rewrite_all_gathers(graph, group, findings)
    _rewrite_reductions(graph, group, findings)
    # An op put in before the first reader of what it gathers may read a weight the graph makes later.
    from torch._inductor.pattern_matcher import stable_topological_sort

    stable_topological_sort(graph)
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
