#include "weft/cuda/check.hpp"

#include <chrono>
#include <thread>

namespace weft {

namespace {

const char* hint_for(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice: return "no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)";
    case cudaErrorInsufficientDriver: return "the driver is older than the CUDA runtime weft was built with, or absent";
    case cudaErrorMemoryAllocation: return "the GPU is out of memory; use smaller shapes or free other allocations";
    case cudaErrorPeerAccessUnsupported: return "these GPUs cannot reach each other by load/store (no NVLink or PCIe P2P)";
    case cudaErrorInvalidValue: return "an argument is out of range; check sizes, pointers and alignment";
    case cudaErrorNoKernelImageForDevice: return "weft was built for sm_90a (Hopper); this GPU needs another target";
    default: return "see the CUDA runtime documentation for this error";
  }
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + "); hint: " + hint_for(status));
}

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  std::string hint = "set NCCL_DEBUG=WARN for NCCL's own account";
  if (status == ncclInvalidUsage) hint = "ranks disagree on the call's arguments or order; " + hint;
  if (status == ncclSystemError || status == ncclRemoteError) hint = "a peer or the network failed; " + hint;
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  ncclGetErrorString(status) + "; hint: " + hint);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::string hint = "check shapes, leading dimensions and 16-byte alignment of the operands";
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) hint = "no cuBLASLt algorithm for this shape, layout or alignment";
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": cuBLAS status " +
                  std::to_string(static_cast<int>(status)) + "; hint: " + hint);
}

bool wait_for_event_with_timeout(cudaEvent_t event, int64_t timeout_ms, const std::function<bool()>& give_up) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) WEFT_CUDA_CHECK(status);
    if (std::chrono::steady_clock::now() > deadline || (give_up && give_up())) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool synchronize_with_timeout(cudaStream_t stream, int64_t timeout_ms, const std::function<bool()>& give_up) {
  cudaEvent_t done;
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  WEFT_CUDA_CHECK(cudaEventRecord(done, stream));
  bool finished = false;
  try {
    finished = wait_for_event_with_timeout(done, timeout_ms, give_up);
  } catch (...) {
    cudaEventDestroy(done);
    throw;
  }
  WEFT_CUDA_CHECK(cudaEventDestroy(done));
  return finished;
}

}  // namespace weft
