"""torch.ops.weft.{ag_gemm, gemm_rs, gemm_ar, gemm_a2a, a2a_gemm}: custom ops with fake (meta)
implementations, so torch.compile(fullgraph=True) traces them without graph breaks; they run on the
current CUDA stream and can be captured with torch.cuda.graph (after one eager call with the same
shapes, as torch.cuda.graph's warm-up does). Each op's sequential equivalent is torch.mm followed (or,
for ag_gemm and a2a_gemm, preceded) by the collective; weft/shapes.py gives the shapes.

Every call is checked before anything is launched: dtype (bfloat16), device (the communicator's
GPU), layout (row-major contiguous, 16-byte aligned) and shapes raise ValueError; ranks whose ops
disagree raise ValueError from the collective check when the op is first made. weft ops are cached
per (op, n, k, strategy, row bucket): symmetric memory is allocated once per shape family.
"""

import torch

from .. import _native
from ..shapes import check_operands, max_rows_bucket
from .comm import communicator

_ops = {}


def _op_for(kind, n, k, rows, strategy):
    comm = communicator()
    bucket = max_rows_bucket(kind, rows, comm.world_size)
    key = (kind, n, k, strategy, bucket)
    op = _ops.get(key)
    if op is None:
        op = _native.Op(comm, kind, n, k, bucket, strategy)
        _ops[key] = op
    return op


def synchronize():
    """Waits for the current stream (bounded) and raises what went wrong in any weft op's calls."""
    stream = torch.cuda.current_stream().cuda_stream
    for op in _ops.values():
        op.finish(stream)


def check_errors():
    """Raises weft.DeviceWaitTimeout if a device-side wait of an earlier call gave up; never waits
    (safe after CUDA graph replays)."""
    for op in _ops.values():
        op.check()


def _check_tensors(kind, a, b, routing=None):
    comm = communicator()
    for name, t in (("A", a), ("B", b)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"weft.{kind}: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise ValueError(f"weft.{kind}: {name} is {t.dtype}; weft's ops take torch.bfloat16")
        if t.device.type != "cuda" or t.device.index != comm.device:
            raise ValueError(f"weft.{kind}: {name} is on {t.device}; weft's communicator is on cuda:{comm.device}")
        if t.dim() != 2 or not t.is_contiguous():
            raise ValueError(f"weft.{kind}: {name} must be a row-major contiguous 2-D tensor (shape {tuple(t.shape)}, "
                             f"strides {t.stride()}); call .contiguous()")
        if t.data_ptr() % 16:
            raise ValueError(f"weft.{kind}: {name} does not start on a 16-byte boundary (a view at an odd offset?); "
                             "call .contiguous() on a fresh tensor")
    routing_shape = None
    if routing is not None:
        if routing.dtype not in (torch.int32, torch.int64) or routing.device.type != "cpu":
            raise ValueError(f"weft.{kind}: routing must be an integer tensor on the CPU (every rank's destinations)")
        routing_shape = tuple(routing.shape)
    return check_operands(kind, tuple(a.shape), tuple(b.shape), comm.world_size, routing_shape)


def _run(kind, a, b, strategy, routing=None):
    rows, n, k = _check_tensors(kind, a, b, routing)
    comm = communicator()
    world = comm.world_size
    table = routing.tolist() if routing is not None else []
    if kind == "ag_gemm":
        out_rows = world * rows
    elif kind == "gemm_rs":
        out_rows = rows // world
    elif kind == "gemm_ar":
        out_rows = rows
    else:
        out_rows = sum(row.count(comm.rank) for row in table)
    c = torch.empty((out_rows, n), dtype=torch.bfloat16, device=a.device)
    op = _op_for(kind, n, k, rows, strategy)
    op.run(a.data_ptr(), b.data_ptr(), c.data_ptr(), rows, torch.cuda.current_stream(a.device).cuda_stream, table)
    return c


@torch.library.custom_op("weft::ag_gemm", mutates_args=())
def ag_gemm(a: torch.Tensor, b: torch.Tensor, strategy: str = "default") -> torch.Tensor:
    """gather(a) @ b.T: a [rows, k] is this rank's shard, b [n, k]; returns [W * rows, n]."""
    return _run("ag_gemm", a, b, strategy)


@torch.library.custom_op("weft::gemm_rs", mutates_args=())
def gemm_rs(a: torch.Tensor, b: torch.Tensor, strategy: str = "default") -> torch.Tensor:
    """reduce_scatter(a @ b.T) over rows: a [rows, k] (a K shard), b [n, k]; returns [rows / W, n]."""
    return _run("gemm_rs", a, b, strategy)


@torch.library.custom_op("weft::gemm_ar", mutates_args=())
def gemm_ar(a: torch.Tensor, b: torch.Tensor, strategy: str = "default") -> torch.Tensor:
    """all_reduce(a @ b.T): a [rows, k] (a K shard), b [n, k]; returns [rows, n]."""
    return _run("gemm_ar", a, b, strategy)


@torch.library.custom_op("weft::gemm_a2a", mutates_args=())
def gemm_a2a(a: torch.Tensor, b: torch.Tensor, routing: torch.Tensor, strategy: str = "default") -> torch.Tensor:
    """Row i of a @ b.T goes to rank routing[r][i]; returns the rows routed here, by source rank then
    row. routing: every rank's destinations, an integer CPU tensor [W, rows], the same on every rank."""
    return _run("gemm_a2a", a, b, strategy, routing)


@torch.library.custom_op("weft::a2a_gemm", mutates_args=())
def a2a_gemm(a: torch.Tensor, b: torch.Tensor, routing: torch.Tensor, strategy: str = "default") -> torch.Tensor:
    """Row i of a goes to rank routing[r][i]; returns (the rows routed here) @ b.T."""
    return _run("a2a_gemm", a, b, strategy, routing)


def _fake_rows(kind, a):
    world = communicator().world_size
    return {"ag_gemm": world * a.shape[0], "gemm_rs": a.shape[0] // world, "gemm_ar": a.shape[0]}[kind]


@ag_gemm.register_fake
def _(a, b, strategy="default"):
    return a.new_empty((_fake_rows("ag_gemm", a), b.shape[0]))


@gemm_rs.register_fake
def _(a, b, strategy="default"):
    return a.new_empty((_fake_rows("gemm_rs", a), b.shape[0]))


@gemm_ar.register_fake
def _(a, b, strategy="default"):
    return a.new_empty((_fake_rows("gemm_ar", a), b.shape[0]))


def _fake_routed(a, b):
    # How many rows arrive depends on the routing's values: an unbacked size.
    received = torch.library.get_ctx().new_dynamic_size()
    return a.new_empty((received, b.shape[0]))


@gemm_a2a.register_fake
def _(a, b, routing, strategy="default"):
    return _fake_routed(a, b)


@a2a_gemm.register_fake
def _(a, b, routing, strategy="default"):
    return _fake_routed(a, b)

