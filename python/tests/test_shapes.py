"""The shape rules of weft.shapes, and the row buckets the torch ops make their ops with."""

import pytest

from weft import _native
from weft.shapes import OPS, check_operands, output_shape

max_rows_bucket = _native.max_rows_bucket  # the torch ops' row buckets (python/src/torch_ops.cpp)


def test_every_op_has_its_output_shape():
    assert output_shape("ag_gemm", (96, 128), (256, 128), 4) == (384, 256)
    assert output_shape("gemm_rs", (96, 128), (256, 128), 4) == (24, 256)
    assert output_shape("gemm_ar", (96, 128), (256, 128), 4) == (96, 256)
    assert output_shape("gemm_a2a", (96, 128), (256, 128), 4, received_rows=7) == (7, 256)
    assert output_shape("a2a_gemm", (96, 128), (256, 128), 4, received_rows=0) == (0, 256)
    assert set(OPS) == {"ag_gemm", "gemm_rs", "gemm_ar", "gemm_a2a", "a2a_gemm"}


@pytest.mark.parametrize(
    "op, a, b, world, routing, words",
    [
        ("ag_gemm", (96, 128), (256, 64), 2, None, "k=128"),
        ("ag_gemm", (96, 128, 1), (256, 128), 2, None, "2-D"),
        ("gemm_rs", (97, 128), (256, 128), 2, None, "multiple of the world size"),
        ("gemm_ar", (96, 100), (256, 100), 2, None, "multiples of 8"),
        ("gemm_ar", (96, 128), (250, 128), 2, None, "multiples of 8"),
        ("gemm_ar", (0, 128), (256, 128), 2, None, "empty"),
        ("gemm_a2a", (96, 128), (256, 128), 2, None, "routing"),
        ("gemm_a2a", (96, 128), (256, 128), 2, (2, 95), "routing"),
        ("gemm_ar", (96, 128), (256, 128), 2, (2, 96), "no routing"),
        ("matmul", (96, 128), (256, 128), 2, None, "unknown op"),
    ],
)
def test_bad_operands_are_named(op, a, b, world, routing, words):
    with pytest.raises(ValueError, match=words):
        check_operands(op, a, b, world, routing)


def test_row_buckets_cover_a_call_and_grow_by_powers_of_two():
    assert max_rows_bucket("ag_gemm", 1, 4) == 1
    assert max_rows_bucket("ag_gemm", 100, 4) == 128
    assert max_rows_bucket("gemm_ar", 128, 2) == 128
    # gemm_rs: a multiple of the world size, at least the call's rows.
    for rows in (4, 100, 384, 8192):
        bucket = max_rows_bucket("gemm_rs", rows, 4)
        assert bucket >= rows and bucket % 4 == 0
    assert max_rows_bucket("gemm_rs", 384, 4) == 512
