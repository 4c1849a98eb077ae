"""What each op takes and gives, as shapes, in Python: weft.output_shape and the argument checks of
code that wants them before calling an op (the torch ops check their arguments in C++,
python/src/torch_ops.cpp). No torch, no GPU.

Per op (A [rows, k] on every rank, B [n, k], W ranks; include/weft/runtime/op.hpp is the reference):
    ag_gemm : C [W * rows, n]  = gather(A) B^T
    gemm_rs : C [rows / W, n]  = this rank's rows of sum_r A_r B_r^T   (rows a multiple of W)
    gemm_ar : C [rows, n]      = sum_r A_r B_r^T
    gemm_a2a: C [received, n]  = the rows of A_r B_r^T routed here      (routing [W, rows])
    a2a_gemm: C [received, n]  = (the rows of A routed here) B^T
"""

OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "gemm_a2a", "a2a_gemm")
# Ops weft plans, proves and benchmarks (weft plan / check / bench) but does not take per call yet:
# tensor-parallel MoE's two halves (routing per call is not part of the op API) and sequence-parallel
# attention (planned and proved on the CPU; no kernel yet).
PLAN_ONLY_OPS = ("ag_moe", "moe_rs", "ag_attention")
ROUTED = ("gemm_a2a", "a2a_gemm")


def check_operands(op, a_shape, b_shape, world_size, routing_shape=None):
    """Raises ValueError naming what is wrong with the shapes of one call; returns (rows, n, k)."""
    if op in PLAN_ONLY_OPS:
        raise ValueError(f"weft.{op} is planned and benchmarked by the weft tool but not callable as an op yet")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; weft's ops are {', '.join(OPS)}")
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"weft.{op}: A and B must be 2-D (A {tuple(a_shape)}, B {tuple(b_shape)})")
    rows, k = a_shape
    n, k_b = b_shape
    if k != k_b:
        raise ValueError(f"weft.{op}: A is [rows, k] and B is [n, k]; A has k={k}, B has k={k_b}")
    if rows < 1 or n < 1 or k < 1:
        raise ValueError(f"weft.{op}: empty operand (A {tuple(a_shape)}, B {tuple(b_shape)})")
    if k % 8 or n % 8:
        raise ValueError(f"weft.{op}: n={n} and k={k} must be multiples of 8 (16-byte rows for the GEMMs)")
    if op == "gemm_rs" and rows % world_size:
        raise ValueError(f"weft.gemm_rs: rows={rows} must be a multiple of the world size {world_size}")
    if op in ROUTED:
        if routing_shape is None or tuple(routing_shape) != (world_size, rows):
            raise ValueError(f"weft.{op}: routing must be [world_size, rows] = [{world_size}, {rows}], "
                             f"got {None if routing_shape is None else tuple(routing_shape)}")
    elif routing_shape is not None:
        raise ValueError(f"weft.{op}: takes no routing")
    return rows, n, k


def output_shape(op, a_shape, b_shape, world_size, received_rows=None):
    """C's shape for one call; routed ops need the rows routed to this rank."""
    rows, n, _ = check_operands(op, a_shape, b_shape, world_size, (world_size, a_shape[0]) if op in ROUTED else None)
    if op == "ag_gemm":
        return (world_size * rows, n)
    if op == "gemm_rs":
        return (rows // world_size, n)
    if op == "gemm_ar":
        return (rows, n)
    if received_rows is None:
        raise ValueError(f"weft.{op}: the output's rows depend on the routing")
    return (received_rows, n)
