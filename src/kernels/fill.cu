#include "weft/kernels/fill.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft {

namespace {

__global__ void fill_u16_kernel(uint16_t* data, int64_t count, uint16_t bits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) data[i] = bits;
}

}  // namespace

void fill_u16(void* data, int64_t count, uint16_t bits, cudaStream_t stream) {
  if (count <= 0) return;
  constexpr int threads = 256;
  const int64_t wanted = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 4096 ? wanted : 4096);
  fill_u16_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(data), count, bits);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace weft
