"""The native module without a GPU: it loads (no libtorch), knows the strategies, builds and checks
plans, and maps C++ errors to Python exceptions."""

import os
import pathlib
import subprocess
import sys

import pytest

import weft


def test_the_native_module_lists_the_strategies():
    names = {name for name, _, _, _ in weft.strategies()}
    assert {"sequential", "decomposed", "signal", "fused", "ficco"} <= names
    for name, paper, description, ops in weft.strategies():
        assert description and ops, name
        assert set(ops) <= set(weft.OPS) | set(weft.shapes.PLAN_ONLY_OPS)


ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_default_is_auto_and_auto_says_why():
    assert weft.default_strategy("ag_gemm", 1) == "auto"
    strategy, reason = weft.choose_strategy("ag_gemm", 1024, 4096, 4096, 1)
    assert strategy == "sequential" and "world of one" in reason
    # MLP-1's ReduceScatter at world 4, on the fitted H200 profile without a table: an overlap
    # strategy, predicted.
    strategy, reason = weft.choose_strategy("gemm_rs", 8192, 4096, 2752, 4, str(ROOT / "bench/machines/h200.json"), "none")
    assert strategy != "sequential" and "predicted" in reason, (strategy, reason)
    # By default (as the op API chooses), weft's shipped H200 measurements: this shape was measured.
    if not os.environ.get("WEFT_TUNING_TABLE"):
        strategy, reason = weft.choose_strategy("gemm_rs", 8192, 4096, 2752, 4)
        assert strategy != "sequential" and "measured at" in reason, (strategy, reason)


def test_a_plan_is_built_validated_and_printed():
    text = weft.describe_plan("gemm_rs", 256, 128, 64, 2, "decomposed")
    assert "decomposed" in text and "reduce" in text.lower()
    assert "fused" in weft.describe_plan("ag_gemm", 128, 12288, 12288, 4, "fused")


def test_b_given_k_by_n_is_a_column_major_buffer_the_plans_read_in_place():
    # B [n, k] stored as B^T [k, n] row-major (what weft.torch passes for weight.t()): declared
    # column-major, read by the GEMMs only, for every strategy of every op with a B operand.
    for name, _, _, ops in weft.strategies():
        for op in ops:
            if op not in weft.OPS:
                continue
            text = weft.describe_plan(op, 256, 128, 64, 2, name, b_layout="kn")
            b_line = [line for line in text.splitlines() if " B input " in line]
            assert b_line and all("column-major" in line for line in b_line), (op, name, text)
            assert "column-major" not in weft.describe_plan(op, 256, 128, 64, 2, name), (op, name)
            if op == "ag_gemm":
                assert "gathered A at the end:" in text, (name, text)
    with pytest.raises(ValueError, match="B layout"):
        weft.describe_plan("gemm_ar", 256, 128, 64, 2, "sequential", b_layout="t")


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="unknown strategy"):
        weft.describe_plan("gemm_rs", 256, 128, 64, 2, "nonsense")
    with pytest.raises(ValueError):
        weft.describe_plan("gemm_rs", 255, 128, 64, 2, "sequential")  # M not a multiple of W
    with pytest.raises(ValueError):
        weft.default_strategy("matmul", 2)
    # Attention is shaped by heads, not (m, n, k): the tool plans it, these functions say so.
    for call in (lambda: weft.describe_plan("ag_attention", 256, 128, 64, 2, "sequential"),
                 lambda: weft.choose_strategy("ag_attention", 256, 128, 64, 2)):
        with pytest.raises(ValueError, match="weft plan --op ag_attention"):
            call()
    assert "ag_attention" in weft.shapes.PLAN_ONLY_OPS


def run_without_gpus(code):
    """Runs Python code in a process that sees no GPU (CUDA_VISIBLE_DEVICES empty)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_without_a_gpu_a_communicator_is_a_cuda_error_caught_as_weft_error():
    # Every device failure is a weft.Error: the CudaError of a process with no GPU is caught by it.
    done = run_without_gpus(
        "import weft\n"
        "try:\n"
        "    weft.Communicator.from_unique_id(weft.new_unique_id(), 0, 1, 0)\n"
        "except weft.Error as e:\n"
        "    print(type(e).__name__, '|', e)\n"
        "else:\n"
        "    print('no error')\n")
    assert done.returncode == 0, done.stdout + done.stderr
    kind, _, message = done.stdout.strip().partition(" | ")
    assert kind == "CudaError", done.stdout
    assert "cuda" in message.lower(), message
    for family in (weft.CudaError, weft.DeviceWaitTimeout, weft.CallTimeout, weft.CommunicatorAborted):
        assert issubclass(family, weft.Error)


def test_a_malformed_unique_id_is_a_value_error():
    with pytest.raises(ValueError, match="128 bytes"):
        weft.Communicator.from_unique_id(b"short", 0, 1, 0)


@pytest.mark.gpu
def test_with_a_gpu_a_world_of_one_is_made():
    # On this rank's GPU (under torchrun every rank runs this test); where torch sees another GPU,
    # on that one too, and torch's current device is left as it was.
    device = int(os.environ.get("LOCAL_RANK", 0))
    comm = weft.Communicator.from_unique_id(weft.new_unique_id(), 0, 1, device)
    assert comm.world_size == 1 and comm.rank == 0 and comm.device == device and not comm.aborted
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        return
    before = torch.cuda.current_device()
    other = (before + 1) % torch.cuda.device_count()
    elsewhere = weft.Communicator.from_unique_id(weft.new_unique_id(), 0, 1, other)
    assert elsewhere.device == other
    assert torch.cuda.current_device() == before, "a communicator for another GPU moved the caller's current device"


def test_plans_are_held_to_the_tools_bounds():
    # The bounds weft's tool holds plans to (weft/plan/plan_bounds.hpp), named, before anything is laid out.
    with pytest.raises(ValueError, match="1 to 64 ranks"):
        weft.describe_plan("gemm_ar", 256, 128, 64, 5000, "sequential")
    with pytest.raises(ValueError, match="1 to 64 ranks"):
        weft.choose_strategy("ag_gemm", 1024, 4096, 4096, 100000)
    with pytest.raises(ValueError, match="m=4611686018427387904 must be between 1 and"):
        weft.describe_plan("gemm_ar", 2 ** 62, 128, 64, 2, "sequential")
    with pytest.raises(ValueError, match="GEMM tile entries"):
        weft.describe_plan("gemm_ar", 2 ** 24, 2 ** 24, 64, 2, "sequential")
    with pytest.raises(ValueError, match="routed rows"):
        weft.describe_plan("gemm_a2a", 2 ** 23, 128, 64, 2, "sequential")


def test_the_native_classes_say_what_they_are():
    for thing in (weft.Communicator, weft.Op, weft.Op.run, weft.Op.finish, weft.Communicator.from_unique_id, weft.describe_plan,
                  weft.choose_strategy, weft.strategies, weft.default_strategy, weft.new_unique_id):
        assert thing.__doc__ and len(thing.__doc__) > 20, thing
    with pytest.raises(TypeError, match="from_unique_id"):
        weft.Communicator()


def test_weft_torch_without_torch_names_the_extra():
    code = "import sys; sys.modules['torch'] = None\ntry:\n    import weft.torch\nexcept ModuleNotFoundError as e:\n    print(e)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "weft[torch]" in done.stdout, done.stdout + done.stderr
