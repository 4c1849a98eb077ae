#include "reference_gemm.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>

#include "weft/kernels/elementwise.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft::bench {

namespace {

constexpr int kTile = 16;

__global__ void reference_gemm_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int64_t m, int64_t n, int64_t k,
                                      bool accumulate) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int64_t row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    const int64_t ar = blockIdx.y * kTile + threadIdx.y, br = blockIdx.x * kTile + threadIdx.y, p = p0 + threadIdx.x;
    as[threadIdx.y][threadIdx.x] = ar < m && p < k ? __bfloat162float(a[ar * k + p]) : 0.0f;
    bs[threadIdx.y][threadIdx.x] = br < n && p < k ? __bfloat162float(b[br * k + p]) : 0.0f;
    __syncthreads();
    for (int q = 0; q < kTile; ++q) sum += as[threadIdx.y][q] * bs[threadIdx.x][q];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = accumulate ? c[row * n + col] + sum : sum;
}

__global__ void difference_kernel(const __nv_bfloat16* got, const float* want, int64_t count, double* sums) {
  double diff = 0, norm = 0, nans = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = __bfloat162float(got[i]);
    if (isnan(g)) nans += 1;
    const double d = static_cast<double>(g) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  atomicAdd(&sums[0], diff);
  atomicAdd(&sums[1], norm);
  atomicAdd(&sums[2], nans);
}

}  // namespace

void reference_gemm_f32(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, bool accumulate, cudaStream_t stream) {
  const dim3 block(kTile, kTile), grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  reference_gemm_kernel<<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), c, m, n,
                                                    k, accumulate);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void expected_op_result(const Problem& p, int rank, uint64_t seed, float* want, void* scratch, cudaStream_t stream) {
  const int world = p.world_size;
  auto* a = static_cast<uint16_t*>(scratch);
  uint16_t* b = a + static_cast<size_t>(world) * static_cast<size_t>(p.m * p.k);
  switch (p.op) {
    case OpKind::ag_gemm:
      // Every rank's shard in rank order, times this rank's B.
      for (int r = 0; r < world; ++r) fill_random_bf16(a + static_cast<size_t>(r) * static_cast<size_t>(p.m * p.k), p.m * p.k, seed_a(seed, r), stream);
      fill_random_bf16(b, p.n * p.k, seed_b(seed, rank), stream);
      reference_gemm_f32(a, b, want, world * p.m, p.n, p.k, false, stream);
      return;
    case OpKind::gemm_rs:
    case OpKind::gemm_ar: {
      // The sum over ranks of A_r B_r^T; gemm_rs keeps this rank's block of rows.
      const int64_t rows = p.op == OpKind::gemm_rs ? p.m / world : p.m;
      const int64_t first = p.op == OpKind::gemm_rs ? rank * rows : 0;
      for (int r = 0; r < world; ++r) {
        fill_random_bf16(a, p.m * p.k, seed_a(seed, r), stream);
        fill_random_bf16(b, p.n * p.k, seed_b(seed, r), stream);
        reference_gemm_f32(a + first * p.k, b, want, rows, p.n, p.k, r > 0, stream);
      }
      return;
    }
    default:
      throw std::invalid_argument("expected_op_result: " + std::string(to_string(p.op)) + " is checked against the host reference instead");
  }
}

double relative_difference_to_f32(const void* got, const float* want, int64_t count, double* sums, cudaStream_t stream) {
  WEFT_CUDA_CHECK(cudaMemsetAsync(sums, 0, 3 * sizeof(double), stream));
  difference_kernel<<<132, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(got), want, count, sums);
  WEFT_CUDA_CHECK(cudaGetLastError());
  double host[3];
  WEFT_CUDA_CHECK(cudaMemcpyAsync(host, sums, sizeof host, cudaMemcpyDeviceToHost, stream));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[2] > 0) return INFINITY;
  return host[1] > 0 ? std::sqrt(host[0] / host[1]) : std::sqrt(host[0]);
}

}  // namespace weft::bench
