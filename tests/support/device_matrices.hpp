// A bf16 or f32 matrix on the device (rows of `stride` elements) copied into a HostMatrix of floats:
// the FP8 GPU tests' outputs, which come in either dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "weft/ir/problem.hpp"
#include "weft/reference/host_matrix.hpp"
#include "weft/cuda/check.hpp"

namespace weft::test_support {

inline HostMatrix download_bf16_or_f32(const void* data, int64_t rows, int64_t cols, int64_t stride, DType dtype) {
  HostMatrix host(rows, cols);
  if (dtype == DType::f32) {
    WEFT_CUDA_CHECK(cudaMemcpy2D(host.data.data(), static_cast<size_t>(cols) * 4, data, static_cast<size_t>(stride) * 4,
                                 static_cast<size_t>(cols) * 4, static_cast<size_t>(rows), cudaMemcpyDeviceToHost));
    return host;
  }
  std::vector<uint16_t> bits(host.data.size());
  WEFT_CUDA_CHECK(cudaMemcpy2D(bits.data(), static_cast<size_t>(cols) * 2, data, static_cast<size_t>(stride) * 2,
                               static_cast<size_t>(cols) * 2, static_cast<size_t>(rows), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t word = uint32_t{bits[i]} << 16;
    std::memcpy(&host.data[i], &word, sizeof word);
  }
  return host;
}

}  // namespace weft::test_support
