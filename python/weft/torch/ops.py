"""torch.ops.weft.*: the ops as PyTorch operators, with fake (meta) implementations, so that
torch.compile(fullgraph=True) traces them without graph breaks; they run on the current CUDA stream
and can be captured with torch.cuda.graph (after one eager call with the same shapes, as
torch.cuda.graph's warm-up does).

    torch.ops.weft.ag_gemm(a, b, strategy=0, scale_a=None, scale_b=None, out_dtype=None) -> C
                                                           gather(a) @ b.T            [W * rows, n]
    torch.ops.weft.gemm_rs(a, b, strategy=0, ...same) -> C reduce_scatter(a @ b.T)    [rows / W, n]
    torch.ops.weft.gemm_ar(a, b, strategy=0, ...same) -> C all_reduce(a @ b.T)        [rows, n]
    torch.ops.weft.gemm_a2a(a, b, routing, strategy=0)     row i of a @ b.T to rank routing[r][i]
    torch.ops.weft.a2a_gemm(a, b, routing, strategy=0)     row i of a to rank routing[r][i], then @ b.T
    torch.ops.weft.{ag_gemm,gemm_rs,gemm_ar}_into(a, b, out, strategy=0)   the same, into `out`
    torch.ops.weft.ag_gemm_gathered(a, b, strategy=0) -> (C, gather(a))   ag_gemm that also hands
                                                           back the gathered input [W * rows, k]
    torch.ops.weft.ag_attention(q, k, v, causal=False, strategy=0) -> O     sequence-parallel
        attention: q, k, v this rank's tokens, [tokens, heads, head_dim] or [tokens, batch, heads,
        head_dim] (k, v with kv_heads: GQA); O (q's shape) = softmax(q K^T / sqrt(head_dim)) V over
        every rank's keys and values, causal by global position (rank r holds tokens r * tokens ..).
        Its sequential equivalent: all_gather of k and v, then SDPA (weft/torch/plain.py). Forward
        only; weft.torch.attention wraps it with autograd. bfloat16, head_dim 64 or 128. Strategy 0
        is weft's auto plan; weft.torch.ops.ag_attention's "default" is the plain-torch path instead
        (attention_default_is_plain says why).
    torch.ops.weft.ag_moe(a, b, choices, experts, strategy=0) -> C        tensor-parallel MoE, first
        half (TileLink Figure 5): a this rank's tokens [rows, k], b this rank's shard of every
        expert's weight stacked [experts * n, k], choices the experts each token picks, either this
        rank's [rows, topk] torch.int32 on the GPU (the router's top-k ids, as they are: nothing is
        read on the host, one plan serves every routing, and a CUDA graph replays the call on new
        ids; strategy "default" and "sequential" take them) or every rank's as an integer CPU tensor
        [W, rows * topk] (the same on every rank; a plan per table); C [W * rows * topk, n]: every rank's
        tokens times their experts' shards, in the MoE row layout (by source rank, then expert, token
        and choice: ir/problem.hpp's moe_rows; plain.moe_row_order), the same on every rank.
    torch.ops.weft.moe_rs(a, b, choices, topk_weights, experts, strategy=0) -> Z    the second
        half: a [W * rows * topk, k] in that layout, b [experts * n, k], topk_weights [W * rows, topk]
        bfloat16 (every rank's tokens' weights); Z [rows, n]: this rank's tokens, each the weighted
        sum of its choices' rows times their expert's b, summed over the ranks.
        The MoE ops' sequential equivalent: all_gather, a gather of each expert's rows and a GEMM per
        expert (ag_moe); a GEMM per expert, the weighted top-k combine and reduce_scatter (moe_rs).
        Its stream timeline with the choices on the GPU: all_gather of the ids, a route kernel (each
        row's place, a counting sort), then the host-table plan's steps reading its tables.
        weft.torch.ops.ag_moe / moe_rs also take torch.topk's int64 ids on the GPU (one conversion).

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

FP8 (ag_gemm, gemm_rs, gemm_ar): a float8_e4m3fn (or float8_e5m2) A with scale_a and scale_b, as
torch._scaled_mm takes them: the op computes the collective of torch._scaled_mm(a, b.t(), scale_a,
scale_b, out_dtype=out_dtype), where b is the FP8 weight row-major [n, k] (its .t() is the
column-major [k, n] operand _scaled_mm wants; the kn view is refused for FP8), scale_a a 0-d or
1-element float32 tensor (tensor-wise) or one per row of a ([rows, 1], row-wise), scale_b one element
or one per output column ([1, n]), both the same mode; dequantization scales (real = value * scale);
out_dtype torch.bfloat16 (the default: weft gives no FP8 output) or torch.float32. For ag_gemm,
tensor-wise scale_a is the scale of the whole gathered A (the same on every rank), as AsyncTP's
fused_all_gather_scaled_matmul assumes. Only strategies whose FP8 plans the executor lowers run
(every one at world 1; above it ag_gemm's library-GEMM plans, which move the FP8 rows with their
tensor or row scales by NCCL or the copy engine, and those that reduce bf16 partial sums: gemm_rs and
gemm_ar with bf16 output); the others, and default where none does, raise ValueError naming why
(weft::Op, plan/gpu_lowering.hpp).

`strategy` is an int (PyTorch's stable C ABI, through which weft registers the kernels in C++,
carries no strings): strategy_id(name) gives it, 0 is "default". The functions of this module with
the ops' names take the name instead: ag_gemm(a, b, strategy="fused", out=None).

The kernels are C++ (python/src/torch_ops.cpp): a call goes from PyTorch's dispatcher to weft's
checks and weft::Op::run without Python. Every call is checked before anything is launched: dtype
(bfloat16, or FP8 with float32 scales), device (the communicator's GPU), layout (row-major contiguous, b also transposed as
above; 16-byte aligned) and
shapes raise ValueError naming what is wrong (the dispatcher turns C++'s std::invalid_argument into it);
ranks whose ops disagree fail in the collective check when the op is first made. Ops are cached per
(op, b layout, n, k, strategy, row bucket): symmetric memory is allocated once per shape family.
"""

import os

import torch

from .. import _native
from . import plain
from .comm import communicator, is_initialized

_SCHEMAS = {
    "ag_gemm": "ag_gemm(Tensor a, Tensor b, int strategy=0, Tensor? scale_a=None, Tensor? scale_b=None, ScalarType? out_dtype=None) -> Tensor",
    "gemm_rs": "gemm_rs(Tensor a, Tensor b, int strategy=0, Tensor? scale_a=None, Tensor? scale_b=None, ScalarType? out_dtype=None) -> Tensor",
    "gemm_ar": "gemm_ar(Tensor a, Tensor b, int strategy=0, Tensor? scale_a=None, Tensor? scale_b=None, ScalarType? out_dtype=None) -> Tensor",
    "gemm_a2a": "gemm_a2a(Tensor a, Tensor b, Tensor routing, int strategy=0) -> Tensor",
    "a2a_gemm": "a2a_gemm(Tensor a, Tensor b, Tensor routing, int strategy=0) -> Tensor",
    "ag_gemm_into": "ag_gemm_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "gemm_rs_into": "gemm_rs_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "gemm_ar_into": "gemm_ar_into(Tensor a, Tensor b, Tensor(a!) out, int strategy=0) -> ()",
    "ag_gemm_gathered": "ag_gemm_gathered(Tensor a, Tensor b, int strategy=0) -> (Tensor, Tensor)",
    "ag_attention": "ag_attention(Tensor q, Tensor k, Tensor v, bool causal=False, int strategy=0) -> Tensor",
    "ag_moe": "ag_moe(Tensor a, Tensor b, Tensor choices, int experts, int strategy=0) -> Tensor",
    "moe_rs": "moe_rs(Tensor a, Tensor b, Tensor choices, Tensor topk_weights, int experts, int strategy=0) -> Tensor",
}

_library = torch.library.Library("weft", "DEF")
for _schema in _SCHEMAS.values():
    _library.define(_schema)
_torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
_native.register_torch_ops(os.path.join(_torch_lib, "libtorch_cpu.so"), os.path.join(_torch_lib, "libtorch_cuda.so"))


# strategy_id's table, read once from the native module's list (whose order its ids follow): a dict
# lookup, which torch.compile traces, where a call into the native module is a graph break.
_STRATEGY_IDS = {"default": 0, **{name: i + 1 for i, (name, *_) in enumerate(_native.strategies())}}


def strategy_id(name):
    """The int torch.ops.weft.* take for a strategy (0: "default"); ValueError listing the known names."""
    sid = _STRATEGY_IDS.get(name)
    return sid if sid is not None else _native.strategy_id(name)  # raises, listing the known names


def synchronize():
    """Waits for the current stream of weft's GPU (bounded) and raises what went wrong in any weft op's calls."""
    device = communicator().device if is_initialized() else None  # weft's GPU, whichever is current
    _native.torch_ops_finish(torch.cuda.current_stream(device).cuda_stream)


def check_errors():
    """Raises weft.DeviceWaitTimeout if a device-side wait of an earlier call gave up; never waits
    (safe after CUDA graph replays)."""
    _native.torch_ops_check()


def _call(op, a, b, strategy, out, *routing, scales=None):
    sid = strategy_id(strategy)
    if scales is not None:  # FP8 (see the module): into `out` not yet
        if out is not None:
            raise ValueError(f"weft.torch.{op}: FP8 calls (scale_a, scale_b) give a new result tensor; they do not take out=")
        return getattr(torch.ops.weft, op)(a, b, sid, *scales)
    if out is None:
        return getattr(torch.ops.weft, op)(a, b, *routing, sid)
    getattr(torch.ops.weft, op + "_into")(a, b, out, sid)
    return out


def _scales(scale_a, scale_b, out_dtype):
    if scale_a is None and scale_b is None and out_dtype is None:
        return None
    return scale_a, scale_b, out_dtype


def ag_gemm(a, b, strategy="default", out=None, return_a=False, scale_a=None, scale_b=None, out_dtype=None):
    """gather(a) @ b.T: a [rows, k] is this rank's shard, b [n, k] (either layout, see the module);
    returns [W * rows, n] (into `out` if given). With return_a, (that, gather(a) [W * rows, k]):
    the input the op gathered, for the weight gradient (not with `out`). FP8: scale_a, scale_b and
    out_dtype as torch._scaled_mm takes them (see the module)."""
    if return_a:
        if out is not None:
            raise ValueError("weft.torch.ag_gemm: return_a gives a new result tensor; it does not take out=")
        if _scales(scale_a, scale_b, out_dtype) is not None:
            raise ValueError("weft.torch.ag_gemm: return_a is not taken with FP8 scales yet (the gathered rows' scales are not handed back)")
        return torch.ops.weft.ag_gemm_gathered(a, b, strategy_id(strategy))
    return _call("ag_gemm", a, b, strategy, out, scales=_scales(scale_a, scale_b, out_dtype))


def gemm_rs(a, b, strategy="default", out=None, scale_a=None, scale_b=None, out_dtype=None):
    """reduce_scatter(a @ b.T) over rows: a [rows, k] (a K shard), b [n, k]; returns [rows / W, n].
    FP8: scale_a, scale_b and out_dtype as torch._scaled_mm takes them (see the module)."""
    return _call("gemm_rs", a, b, strategy, out, scales=_scales(scale_a, scale_b, out_dtype))


def gemm_ar(a, b, strategy="default", out=None, scale_a=None, scale_b=None, out_dtype=None):
    """all_reduce(a @ b.T): a [rows, k] (a K shard), b [n, k]; returns [rows, n]. FP8: scale_a,
    scale_b and out_dtype as torch._scaled_mm takes them (see the module)."""
    return _call("gemm_ar", a, b, strategy, out, scales=_scales(scale_a, scale_b, out_dtype))


def gemm_a2a(a, b, routing, strategy="default"):
    """Row i of a @ b.T goes to rank routing[r][i]; returns the rows routed here, by source rank then
    row. routing: every rank's destinations, an integer CPU tensor [W, rows], the same on every rank."""
    return torch.ops.weft.gemm_a2a(a, b, routing, strategy_id(strategy))


def a2a_gemm(a, b, routing, strategy="default"):
    """Row i of a goes to rank routing[r][i]; returns (the rows routed here) @ b.T."""
    return torch.ops.weft.a2a_gemm(a, b, routing, strategy_id(strategy))


def ag_attention(q, k, v, causal=False, strategy="default"):
    """Sequence-parallel attention of this rank's queries over every rank's keys and values (see the
    module); forward only (weft.torch.attention.SequenceParallelAttention has the backward).
    "default" is the op's sequential equivalent in plain torch (plain.sequence_parallel_attention:
    torch.distributed's all_gather of k and v above one rank, then the installed torch's SDPA), not
    weft's kernel: see attention_default_is_plain. Any other strategy runs weft's attention kernel
    ("auto": the plan weft's model picks; torch.ops.weft.ag_attention's strategy 0 is that too)."""
    if attention_default_is_plain(strategy):
        return plain.sequence_parallel_attention(q, k, v, causal)
    return torch.ops.weft.ag_attention(q, k, v, causal, strategy_id(strategy))


def attention_default_is_plain(strategy):
    """Whether `strategy` takes attention's plain-torch path: "default" does, because weft's attention
    kernel is slower than the SDPA kernel it would replace, alone and in its overlapped plans
    (bench/results/README.md has the measurements; `python -m weft.benchmark --attention ...` makes
    them again), so overlapping the gather cannot win back what the kernel loses. The day the
    kernel's rows beat SDPA's, this answers False and "default" becomes weft's auto plan."""
    return strategy == "default"


def _device_choices(choices):
    """Choices on the GPU as the op takes them: int32 (torch.topk gives int64), contiguous, 16-byte
    aligned (a rank's slice of replicated ids may not be, and a refusal on some ranks alone would
    leave the others in the op's collectives). The offset into the storage says it (PyTorch's
    allocations start aligned), which torch.compile traces, where data_ptr() would break the graph."""
    if choices.device.type == "cpu":
        return choices
    if choices.dtype != torch.int32 or not choices.is_contiguous():
        return choices.to(torch.int32).contiguous()
    return choices.clone() if choices.storage_offset() % 4 else choices  # 4 int32 elements: 16 bytes


def ag_moe(a, b, choices, experts, strategy="default"):
    """Tensor-parallel MoE's first half (see the module): [W * rows * topk, n] in the MoE row layout.
    choices: this rank's [rows, topk] ids on the GPU, or every rank's [W, rows * topk] on the CPU."""
    return torch.ops.weft.ag_moe(a, b, _device_choices(choices), experts, strategy_id(strategy))


def moe_rs(a, b, choices, topk_weights, experts, strategy="default"):
    """Tensor-parallel MoE's second half (see the module): this rank's tokens [rows, n]. choices as
    ag_moe's (this rank's [rows, topk] on the GPU, or every rank's on the CPU)."""
    return torch.ops.weft.moe_rs(a, b, _device_choices(choices), topk_weights, experts, strategy_id(strategy))


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


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _fake_out_dtype(kind, a, b, scale_a, scale_b, out_dtype):
    """The result's dtype of a call with these arguments, refusing (ValueError, naming the argument
    and what it must be) what the kernel (python/src/torch_ops.cpp) would refuse for its dtypes and
    the scales' shapes: the fake kernels' view of the same rules, so that a traced or compiled call
    fails where the eager call would."""
    op = f"weft.{kind}"
    fp8 = a.dtype in _FP8
    if not fp8:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"{op}: {'scale_a' if scale_a is not None else 'scale_b'} is given, but A is not FP8; "
                             "the scales are for float8_e4m3fn / float8_e5m2 operands")
        if out_dtype not in (None, torch.bfloat16):
            raise ValueError(f"{op}: out_dtype {out_dtype} is not taken: bfloat16 products give torch.bfloat16")
        return torch.bfloat16
    if b.dtype not in _FP8:
        raise ValueError(f"{op}: B is {b.dtype}; A is FP8 here, so B must be torch.float8_e4m3fn or torch.float8_e5m2")
    if a.dtype == torch.float8_e5m2 and b.dtype == torch.float8_e5m2:
        raise ValueError(f"{op}: e5m2 x e5m2 is not an FP8 GEMM: one of A and B must be torch.float8_e4m3fn")
    if scale_a is None or scale_b is None:
        raise ValueError(f"{op}: A is {a.dtype}, so {'scale_b' if scale_a is not None else 'scale_a'} is needed (float32: one element, "
                         "or one per row of A / per column of the output, as torch._scaled_mm takes them)")
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale.dtype != torch.float32:
            raise ValueError(f"{op}: {name} is {scale.dtype}; the scales are torch.float32 (dequantization scales, as torch._scaled_mm takes them)")
    rows, n = a.shape[0], b.shape[0]
    if b.dim() == 2 and b.stride(1) != 1 and b.shape[1] > 1:
        raise ValueError(f"{op}: an FP8 B must be row-major [n, k] (strides (k, 1)), whose .t() is the column-major [k, n] operand "
                         "torch._scaled_mm takes")
    b_row = scale_b.dim() in (1, 2) and scale_b.shape[-1] == n and scale_b.numel() == n
    if b_row:
        a_row = scale_a.dim() in (1, 2) and scale_a.shape[0] == rows and scale_a.numel() == rows
        if not (a_row or (rows == 1 and scale_a.numel() == 1)):
            raise ValueError(f"{op}: scale_b is one per column (row-wise scaling), so scale_a must be one per row of A: "
                             f"[{rows}, 1] float32, got {list(scale_a.shape)}")
    elif scale_b.numel() != 1:
        raise ValueError(f"{op}: scale_b must be one float32 (a 0-d or 1-element tensor: tensor-wise scaling) or one per column of "
                         f"the output ([1, {n}]: row-wise), got {list(scale_b.shape)}")
    elif scale_a.numel() != 1:
        raise ValueError(f"{op}: scale_b is one float32 (tensor-wise scaling), so scale_a must be one too (a 0-d or 1-element tensor), "
                         f"got {list(scale_a.shape)}")
    if out_dtype not in (None, torch.bfloat16, torch.float32):
        raise ValueError(f"{op}: out_dtype {out_dtype} is not taken: FP8 products give torch.bfloat16 or torch.float32")
    return out_dtype or torch.bfloat16


def _register_fakes():
    for kind in ("ag_gemm", "gemm_rs", "gemm_ar"):
        def fake(a, b, strategy=0, scale_a=None, scale_b=None, out_dtype=None, kind=kind):
            dtype = _fake_out_dtype(kind, a, b, scale_a, scale_b, out_dtype)
            return a.new_empty((_fake_rows(kind, a), b.shape[0]), dtype=dtype)

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

    def fake_attention(q, k, v, causal=False, strategy=0):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dtype != torch.bfloat16:
                raise ValueError(f"weft.ag_attention: {name} is {t.dtype}; weft's attention takes torch.bfloat16")
            if t.dim() not in (3, 4):
                raise ValueError(f"weft.ag_attention: {name} must be [tokens, heads, head_dim] or [tokens, batch, heads, head_dim]")
        if k.shape != v.shape or k.dim() != q.dim() or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
            raise ValueError(f"weft.ag_attention: k and v must be q's shape with kv_heads for heads (q {list(q.shape)}, k {list(k.shape)}, "
                             f"v {list(v.shape)})")
        return q.new_empty(q.shape)

    torch.library.register_fake("weft::ag_attention", fake_attention, lib=_library)

    def fake_ag_moe(a, b, choices, experts, strategy=0):
        world = communicator().world_size
        if experts < 1 or b.shape[0] % experts:
            raise ValueError(f"weft.ag_moe: B must be [experts * n, k] with experts={experts}, got {list(b.shape)}")
        if choices.device.type != "cpu":
            if choices.dim() != 2 or choices.shape[0] != a.shape[0] or choices.dtype != torch.int32:
                raise ValueError(f"weft.ag_moe: choices on the GPU must be this rank's [rows, topk] torch.int32 with rows={a.shape[0]} (A's), "
                                 f"got {list(choices.shape)} {choices.dtype}")
            topk = choices.shape[1]
        elif choices.dim() != 2 or choices.shape[0] != world or choices.shape[1] % a.shape[0]:
            raise ValueError(f"weft.ag_moe: choices on the CPU must be [world_size, rows * topk] = [{world}, {a.shape[0]} * topk], "
                             f"got {list(choices.shape)}")
        else:
            topk = choices.shape[1] // a.shape[0]
        return a.new_empty((world * a.shape[0] * topk, b.shape[0] // experts))

    def fake_moe_rs(a, b, choices, topk_weights, experts, strategy=0):
        world = communicator().world_size
        if experts < 1 or b.shape[0] % experts:
            raise ValueError(f"weft.moe_rs: B must be [experts * n, k] with experts={experts}, got {list(b.shape)}")
        if topk_weights.shape[0] % world:
            raise ValueError("weft.moe_rs: topk_weights must be [world_size * rows, topk] (every rank's tokens)")
        rows = topk_weights.shape[0] // world
        if choices.device.type != "cpu" and (list(choices.shape) != [rows, topk_weights.shape[1]] or choices.dtype != torch.int32):
            raise ValueError(f"weft.moe_rs: choices on the GPU must be this rank's [rows, topk] = [{rows}, {topk_weights.shape[1]}] torch.int32, "
                             f"got {list(choices.shape)} {choices.dtype}")
        return a.new_empty((topk_weights.shape[0] // world, b.shape[0] // experts))

    torch.library.register_fake("weft::ag_moe", fake_ag_moe, lib=_library)
    torch.library.register_fake("weft::moe_rs", fake_moe_rs, lib=_library)


_register_fakes()
