"""torch.ops.weft.*: the ops as PyTorch operators, with fake (meta) implementations, so that
torch.compile(fullgraph=True) traces them without graph breaks; they run on the current CUDA stream
and can be captured with torch.cuda.graph (after one eager call with the same shapes, as
torch.cuda.graph's warm-up does).

    torch.ops.weft.ag_gemm(a, b, strategy=0) -> C          gather(a) @ b.T            [W * rows, n]
    torch.ops.weft.gemm_rs(a, b, strategy=0) -> C          reduce_scatter(a @ b.T)    [rows / W, n]
    torch.ops.weft.gemm_ar(a, b, strategy=0) -> C          all_reduce(a @ b.T)        [rows, n]
    torch.ops.weft.gemm_a2a(a, b, routing, strategy=0)     row i of a @ b.T to rank routing[r][i]
    torch.ops.weft.a2a_gemm(a, b, routing, strategy=0)     row i of a to rank routing[r][i], then @ b.T
    torch.ops.weft.{ag_gemm,gemm_rs,gemm_ar}_into(a, b, out, strategy=0)   the same, into `out`
    torch.ops.weft.ag_gemm_gathered(a, b, strategy=0) -> (C, gather(a))   ag_gemm that also hands
                                                           back the gathered input [W * rows, k]

Each op's sequential equivalent is torch.mm followed (ag_gemm, a2a_gemm: preceded) by the
collective; weft/shapes.py gives the shapes. At world 1 every op is the GEMM alone.

b is the [n, k] matrix of a @ b.T in either of two layouts, read from its strides, never copied:
row-major [n, k] (strides (k, 1): a linear layer's weight, so ag_gemm(x, w) is x @ w.T), or the
transpose of a row-major [k, n] (strides (1, n): X.t() of a contiguous X, so gemm_rs(dy, w.t()) is
reduce_scatter(dy @ w) on w's own memory, with no w.t().contiguous()). Any other view is refused
(ValueError: call .contiguous()). An op is made per layout.

ag_gemm_gathered is AsyncTP's return_A: the gathered input comes back from the op that gathered it
(the sequential strategy's all-gather writes it in place; the others copy the shards there from
where the call left them, one device copy), so a layer keeps it for its weight gradient instead of
gathering again. Its sequential equivalent: g = all_gather(a); (g @ b.T, g).

`strategy` is an int (PyTorch's stable C ABI, through which weft registers the kernels in C++,
carries no strings): strategy_id(name) gives it, 0 is "default". The functions of this module with
the ops' names take the name instead: ag_gemm(a, b, strategy="fused", out=None).

The kernels are C++ (python/src/torch_ops.cpp): a call goes from PyTorch's dispatcher to weft's
checks and weft::Op::run without Python. Every call is checked before anything is launched: dtype
(bfloat16), device (the communicator's GPU), layout (row-major contiguous, b also transposed as
above; 16-byte aligned) and
shapes raise ValueError naming what is wrong (the dispatcher turns C++'s std::invalid_argument into it);
ranks whose ops disagree fail in the collective check when the op is first made. Ops are cached per
(op, b layout, n, k, strategy, row bucket): symmetric memory is allocated once per shape family.
"""

import functools
import os

import torch

from .. import _native
from .comm import communicator

_SCHEMAS = {
    "ag_gemm": "ag_gemm(Tensor a, Tensor b, int strategy=0) -> Tensor",
    "gemm_rs": "gemm_rs(Tensor a, Tensor b, int strategy=0) -> Tensor",
    "gemm_ar": "gemm_ar(Tensor a, Tensor b, int strategy=0) -> Tensor",
    "gemm_a2a": "gemm_a2a(Tensor a, Tensor b, Tensor routing, int strategy=0) -> Tensor",
    "a2a_gemm": "a2a_gemm(Tensor a, Tensor b, Tensor routing, int strategy=0) -> Tensor",
    "ag_gemm_into": "ag_gemm_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "gemm_rs_into": "gemm_rs_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "gemm_ar_into": "gemm_ar_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "ag_gemm_gathered": "ag_gemm_gathered(Tensor a, Tensor b, int strategy=0) -> (Tensor, Tensor)",
}

_library = torch.library.Library("weft", "DEF")
for _schema in _SCHEMAS.values():
    _library.define(_schema)
_torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
_native.register_torch_ops(os.path.join(_torch_lib, "libtorch_cpu.so"), os.path.join(_torch_lib, "libtorch_cuda.so"))


@functools.lru_cache(maxsize=None)
def strategy_id(name):
    """The int torch.ops.weft.* take for a strategy (0: "default"); ValueError listing the known names."""
    return _native.strategy_id(name)


def synchronize():
    """Waits for the current stream (bounded) and raises what went wrong in any weft op's calls."""
    _native.torch_ops_finish(torch.cuda.current_stream().cuda_stream)


def check_errors():
    """Raises weft.DeviceWaitTimeout if a device-side wait of an earlier call gave up; never waits
    (safe after CUDA graph replays)."""
    _native.torch_ops_check()


def _call(op, a, b, strategy, out, *routing):
    sid = strategy_id(strategy)
    if out is None:
        return getattr(torch.ops.weft, op)(a, b, *routing, sid)
    getattr(torch.ops.weft, op + "_into")(a, b, out, sid)
    return out


def ag_gemm(a, b, strategy="default", out=None, return_a=False):
    """gather(a) @ b.T: a [rows, k] is this rank's shard, b [n, k] (either layout, see the module);
    returns [W * rows, n] (into `out` if given). With return_a, (that, gather(a) [W * rows, k]):
    the input the op gathered, for the weight gradient (not with `out`)."""
    if return_a:
        if out is not None:
            raise ValueError("weft.torch.ag_gemm: return_a gives a new result tensor; it does not take out=")
        return torch.ops.weft.ag_gemm_gathered(a, b, strategy_id(strategy))
    return _call("ag_gemm", a, b, strategy, out)


def gemm_rs(a, b, strategy="default", out=None):
    """reduce_scatter(a @ b.T) over rows: a [rows, k] (a K shard), b [n, k]; returns [rows / W, n]."""
    return _call("gemm_rs", a, b, strategy, out)


def gemm_ar(a, b, strategy="default", out=None):
    """all_reduce(a @ b.T): a [rows, k] (a K shard), b [n, k]; returns [rows, n]."""
    return _call("gemm_ar", a, b, strategy, out)


def gemm_a2a(a, b, routing, strategy="default"):
    """Row i of a @ b.T goes to rank routing[r][i]; returns the rows routed here, by source rank then
    row. routing: every rank's destinations, an integer CPU tensor [W, rows], the same on every rank."""
    return torch.ops.weft.gemm_a2a(a, b, routing, strategy_id(strategy))


def a2a_gemm(a, b, routing, strategy="default"):
    """Row i of a goes to rank routing[r][i]; returns (the rows routed here) @ b.T."""
    return torch.ops.weft.a2a_gemm(a, b, routing, strategy_id(strategy))


def _b_layout(b_layout):
    if b_layout not in ("nk", "kn"):
        raise ValueError(f"b_layout must be 'nk' (b row-major [n, k]) or 'kn' (b given as X.t() of a row-major [k, n]), got {b_layout!r}")
    return b_layout


def symmetric_input(op, b_shape, rows, strategy="default", b_layout="nk"):
    """The tensor a producer writes this rank's A into (torch.mm(..., out=x), x.copy_(...)) so that
    the op's next call of `rows` rows reads it where its peers pull it from, copying nothing in:
    [rows, k] bfloat16 in the op's symmetric memory (DLPack, no copy). Pass it as the op's A. None
    where the op reads A from the caller's memory anyway (a world of one: the GEMM alone; a strategy
    that does not gather A from symmetric memory). The buffer is the op's: its next call with these
    rows reads whatever is in it, and each such call ends with a barrier so that no rank overwrites it
    while a peer still reads. Collective the first time for a shape. b_shape is b's [n, k];
    b_layout the layout the calls pass b in ("kn" for b = X.t(), see the module)."""
    n, k = b_shape
    return _native.torch_symmetric_a(op, n, k, rows, strategy_id(strategy), _b_layout(b_layout))


def copies_in_last_call(op, b_shape, rows, strategy="default", b_layout="nk"):
    """Copies of A into symmetric memory the last call of this op's shape family made (0 or 1)."""
    n, k = b_shape
    return _native.torch_copies_in_last_call(op, n, k, rows, strategy_id(strategy), _b_layout(b_layout))


def _fake_rows(kind, a):
    world = communicator().world_size
    return {"ag_gemm": world * a.shape[0], "gemm_rs": a.shape[0] // world, "gemm_ar": a.shape[0]}[kind]


def _register_fakes():
    for kind in ("ag_gemm", "gemm_rs", "gemm_ar"):
        def fake(a, b, strategy=0, kind=kind):
            return a.new_empty((_fake_rows(kind, a), b.shape[0]))

        def fake_into(a, b, out, strategy=0):
            return None

        torch.library.register_fake("weft::" + kind, fake, lib=_library)
        torch.library.register_fake("weft::" + kind + "_into", fake_into, lib=_library)

    def fake_gathered(a, b, strategy=0):
        return a.new_empty((_fake_rows("ag_gemm", a), b.shape[0])), a.new_empty((_fake_rows("ag_gemm", a), a.shape[1]))

    torch.library.register_fake("weft::ag_gemm_gathered", fake_gathered, lib=_library)

    def fake_routed(a, b, routing, strategy=0):
        # How many rows arrive depends on the routing's values: an unbacked size.
        received = torch.library.get_ctx().new_dynamic_size()
        return a.new_empty((received, b.shape[0]))

    for kind in ("gemm_a2a", "a2a_gemm"):
        torch.library.register_fake("weft::" + kind, fake_routed, lib=_library)


_register_fakes()
