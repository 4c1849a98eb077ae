// Checks for CUDA runtime, driver, cuBLAS and NCCL return codes. Every call into those libraries goes
// through one of these macros, so a failure throws weft::CudaError naming the call, where it was made,
// the error and a hint, instead of surfacing later as a wrong number or a hang.
//   WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace weft {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

}  // namespace weft

#define WEFT_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    const cudaError_t weft_status_ = (call);                                              \
    if (weft_status_ != cudaSuccess) ::weft::throw_cuda_error(weft_status_, #call, __FILE__, __LINE__); \
  } while (0)
