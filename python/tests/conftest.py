"""GPU tests (marker gpu) need torch and a CUDA device; elsewhere they are skipped."""

import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs torch with a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def weft_on_this_gpu():
    """weft's communicator for the GPU tests, made once per process: this rank's GPU (LOCAL_RANK),
    torch.distributed over NCCL first where torchrun started several ranks."""
    import os

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import weft.torch as wt

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if "WORLD_SIZE" in os.environ and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    return wt.communicator() if wt.is_initialized() else wt.init()


def pytest_runtest_logreport(report):
    """With WEFT_PYTEST_REPORT_NOW set (scripts/several_gpus.sh under torchrun): each failure printed
    when it happens, with the rank, so that a run cut short by a hang still says what failed first."""
    import os

    if not os.environ.get("WEFT_PYTEST_REPORT_NOW") or not report.failed:
        return
    rank = os.environ.get("RANK", "0")
    text = report.longreprtext.strip().splitlines()
    last = next((line for line in reversed(text) if line.startswith("E ")), text[-1] if text else "")
    print(f"\nWEFT-FAILED rank {rank} {report.when}: {report.nodeid}: {last[:300]}", flush=True)
    print("\n".join(text[-40:]), flush=True)
