"""weft: a GEMM overlapped with the inter-GPU communication that depends on it.

The native module (weft._native) is the C++ op API with pointers, shapes and streams as integers;
it does not link libtorch. ``weft.torch`` is the PyTorch layer over it: ``weft.torch.init()``,
``torch.ops.weft.*`` and tensor-parallel layers with autograd.

    import weft
    op = weft.Op(comm, "gemm_rs", n=4096, k=14336 // W, max_rows=8192)
    op.run(a_ptr, b_ptr, c_ptr, rows, stream_handle)
"""

from ._native import configure_cuda_for_waits as _configure_cuda_for_waits

# Before the process's first CUDA call where weft is imported first: stream waits need more than
# one hardware queue and eagerly loaded modules (weft/runtime/signal_set.hpp says why). A value the
# user set is kept.
_configure_cuda_for_waits()

from ._native import (  # noqa: E402
    CallTimeout,
    Communicator,
    CommunicatorAborted,
    CudaError,
    DeviceWaitTimeout,
    Error,
    Op,
    choose_strategy,
    default_strategy,
    describe_plan,
    new_unique_id,
    strategies,
)
from .shapes import OPS, output_shape  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "CallTimeout",
    "Communicator",
    "CommunicatorAborted",
    "CudaError",
    "DeviceWaitTimeout",
    "Error",
    "OPS",
    "Op",
    "choose_strategy",
    "default_strategy",
    "describe_plan",
    "new_unique_id",
    "output_shape",
    "strategies",
]
