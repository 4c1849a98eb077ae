// Checks for CUDA runtime, cuBLAS and NCCL return codes. Every call into those libraries goes
// through one of these macros, so a failure throws weft::CudaError naming the call, where it was made,
// the error and a hint, instead of surfacing later as a wrong number or a hang. The lowest layer of
// the CUDA part: the runtime and the kernels both check through it.
//   WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
//   WEFT_NCCL_CHECK(ncclAllReduce(...));   WEFT_CUBLAS_CHECK(cublasLtMatmul(...));
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <string>

#include "weft/errors.hpp"

namespace weft {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// Waits for `stream` to finish for at most `timeout_ms`; returns false on timeout (the work stays
// queued). Every host-side wait on work that depends on another rank goes through this, so a missing
// peer becomes an error instead of a hang. `give_up`, polled while waiting, ends the wait early
// (false) when it says the work cannot finish.
bool synchronize_with_timeout(cudaStream_t stream, int64_t timeout_ms, const std::function<bool()>& give_up = {});
// The same for one recorded event: true once it has completed, false after `timeout_ms`.
bool wait_for_event_with_timeout(cudaEvent_t event, int64_t timeout_ms, const std::function<bool()>& give_up = {});

}  // namespace weft

#define WEFT_CUDA_CHECK(call)                                                                        \
  do {                                                                                               \
    const cudaError_t weft_status_ = (call);                                                         \
    if (weft_status_ != cudaSuccess) ::weft::throw_cuda_error(weft_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define WEFT_NCCL_CHECK(call)                                                                        \
  do {                                                                                               \
    const ncclResult_t weft_status_ = (call);                                                        \
    if (weft_status_ != ncclSuccess) ::weft::throw_nccl_error(weft_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define WEFT_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                               \
    const cublasStatus_t weft_status_ = (call);                                                      \
    if (weft_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::weft::throw_cublas_error(weft_status_, #call, __FILE__, __LINE__);                           \
  } while (0)
