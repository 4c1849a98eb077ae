"""The native module without a GPU: it loads (no libtorch), knows the strategies, builds and checks
plans, and maps C++ errors to Python exceptions."""

import pytest

import weft


def test_the_native_module_lists_the_strategies():
    names = {name for name, _, _, _ in weft.strategies()}
    assert {"sequential", "decomposed", "signal", "fused", "ficco"} <= names
    for name, paper, description, ops in weft.strategies():
        assert description and ops, name
        assert set(ops) <= set(weft.OPS)


def test_the_default_strategy_is_sequential_alone_and_decomposed_beside_peers():
    assert weft.default_strategy("ag_gemm", 1) == "sequential"
    assert weft.default_strategy("gemm_rs", 4) == "decomposed"


def test_a_plan_is_built_validated_and_printed():
    text = weft.describe_plan("gemm_rs", 256, 128, 64, 2, "decomposed")
    assert "decomposed" in text and "reduce" in text.lower()
    assert "fused" in weft.describe_plan("ag_gemm", 128, 12288, 12288, 4, "fused")


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="unknown strategy"):
        weft.describe_plan("gemm_rs", 256, 128, 64, 2, "nonsense")
    with pytest.raises(ValueError):
        weft.describe_plan("gemm_rs", 255, 128, 64, 2, "sequential")  # M not a multiple of W
    with pytest.raises(ValueError):
        weft.default_strategy("matmul", 2)


def test_device_errors_form_one_family():
    for kind in (weft.CudaError, weft.DeviceWaitTimeout, weft.CallTimeout, weft.CommunicatorAborted):
        assert issubclass(kind, weft.Error)
    assert issubclass(weft.Error, Exception)


def test_no_gpu_is_an_error_not_a_crash():
    # Without a GPU (CI) making a communicator fails with weft.CudaError; with one it works.
    try:
        comm = weft.Communicator.from_unique_id(weft.new_unique_id(), 0, 1, 0)
    except weft.CudaError as e:
        assert "cuda" in str(e).lower()
    else:
        assert comm.world_size == 1 and comm.rank == 0
    with pytest.raises(ValueError, match="128 bytes"):
        weft.Communicator.from_unique_id(b"short", 0, 1, 0)
