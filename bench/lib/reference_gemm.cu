#include "reference_gemm.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"

namespace weft::bench {

namespace {

constexpr int kTile = 16;

// Absolute: the product of the inputs' absolute values (the scale of each element's error bound).
template <bool Absolute>
__global__ void reference_gemm_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int64_t m, int64_t n, int64_t k,
                                      bool accumulate) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int64_t row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    const int64_t ar = blockIdx.y * kTile + threadIdx.y, br = blockIdx.x * kTile + threadIdx.y, p = p0 + threadIdx.x;
    const float av = ar < m && p < k ? __bfloat162float(a[ar * k + p]) : 0.0f;
    const float bv = br < n && p < k ? __bfloat162float(b[br * k + p]) : 0.0f;
    as[threadIdx.y][threadIdx.x] = Absolute ? fabsf(av) : av;
    bs[threadIdx.y][threadIdx.x] = Absolute ? fabsf(bv) : bv;
    __syncthreads();
    for (int q = 0; q < kTile; ++q) sum += as[threadIdx.y][q] * bs[threadIdx.x][q];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = accumulate ? c[row * n + col] + sum : sum;
}

struct CheckCounters {
  unsigned long long outside, nans, nonzero_wanted, first_outside;
  unsigned int worst_ratio_bits;  // a non-negative float: its bits order as the values do
};
static_assert(sizeof(CheckCounters) <= kCheckCounterBytes);

__global__ void check_kernel(const __nv_bfloat16* got, const float* want, const float* scale, int64_t count, double factor,
                             CheckCounters* counters) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double g = __bfloat162float(got[i]), w = want[i], bound = factor * scale[i], d = fabs(g - w);
    if (w != 0.0) atomicAdd(&counters->nonzero_wanted, 1ull);
    const bool nan = isnan(g);
    if (nan) atomicAdd(&counters->nans, 1ull);
    const float ratio = nan || (bound == 0.0 && d > 0.0) ? INFINITY : bound > 0.0 ? static_cast<float>(d / bound) : 0.0f;
    atomicMax(&counters->worst_ratio_bits, __float_as_uint(ratio));
    if (nan || d > bound) {
      atomicAdd(&counters->outside, 1ull);
      atomicMin(&counters->first_outside, static_cast<unsigned long long>(i));
    }
  }
}

}  // namespace

void reference_gemm_f32(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, bool accumulate, cudaStream_t stream) {
  const dim3 block(kTile, kTile), grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  reference_gemm_kernel<false><<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), c,
                                                           m, n, k, accumulate);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void reference_gemm_abs_f32(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, bool accumulate, cudaStream_t stream) {
  const dim3 block(kTile, kTile), grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  reference_gemm_kernel<true><<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), c,
                                                          m, n, k, accumulate);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void expected_op_result(const Problem& p, int rank, uint64_t seed, float* want, float* scale, void* scratch, cudaStream_t stream) {
  const int world = p.world_size;
  auto* a = static_cast<uint16_t*>(scratch);
  uint16_t* b = a + static_cast<size_t>(world) * static_cast<size_t>(p.m * p.k);
  switch (p.op) {
    case OpKind::ag_gemm:
      // Every rank's shard in rank order, times this rank's B.
      for (int r = 0; r < world; ++r) fill_random_bf16(a + static_cast<size_t>(r) * static_cast<size_t>(p.m * p.k), p.m * p.k, seed_a(seed, r), stream);
      fill_random_bf16(b, p.n * p.k, seed_b(seed, rank), stream);
      reference_gemm_f32(a, b, want, world * p.m, p.n, p.k, false, stream);
      reference_gemm_abs_f32(a, b, scale, world * p.m, p.n, p.k, false, stream);
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
        reference_gemm_abs_f32(a + first * p.k, b, scale, rows, p.n, p.k, r > 0, stream);
      }
      return;
    }
    default:
      throw std::invalid_argument("expected_op_result: " + std::string(to_string(p.op)) + " is checked against the host reference instead");
  }
}

ElementCheck check_elements_on_device(const void* got, const float* want, const float* scale, int64_t rows, int64_t cols, double factor,
                                      void* counters, cudaStream_t stream) {
  const int64_t count = rows * cols;
  CheckCounters host{0, 0, 0, ~0ull, 0};
  WEFT_CUDA_CHECK(cudaMemcpyAsync(counters, &host, sizeof host, cudaMemcpyHostToDevice, stream));
  if (count > 0) {
    check_kernel<<<132, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(got), want, scale, count, factor, static_cast<CheckCounters*>(counters));
    WEFT_CUDA_CHECK(cudaGetLastError());
  }
  WEFT_CUDA_CHECK(cudaMemcpyAsync(&host, counters, sizeof host, cudaMemcpyDeviceToHost, stream));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  ElementCheck c;
  c.elements = count;
  c.cols = std::max<int64_t>(cols, 1);
  c.outside = static_cast<int64_t>(host.outside);
  c.nans = static_cast<int64_t>(host.nans);
  c.zero_reference = count > 0 && host.nonzero_wanted == 0;
  float worst;
  std::memcpy(&worst, &host.worst_ratio_bits, sizeof worst);
  c.worst_ratio = worst;
  if (host.outside > 0) {
    // The first offending element's values, for the report.
    const int64_t i = static_cast<int64_t>(host.first_outside);
    uint16_t g;
    float w, s;
    WEFT_CUDA_CHECK(cudaMemcpy(&g, static_cast<const uint16_t*>(got) + i, sizeof g, cudaMemcpyDeviceToHost));
    WEFT_CUDA_CHECK(cudaMemcpy(&w, want + i, sizeof w, cudaMemcpyDeviceToHost));
    WEFT_CUDA_CHECK(cudaMemcpy(&s, scale + i, sizeof s, cudaMemcpyDeviceToHost));
    const uint32_t wide = static_cast<uint32_t>(g) << 16;
    float gf;
    std::memcpy(&gf, &wide, sizeof gf);
    c.first_outside = i;
    c.got = gf;
    c.want = w;
    c.bound = factor * s;
  }
  return c;
}

}  // namespace weft::bench
