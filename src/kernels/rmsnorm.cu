#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "weft/kernels/rmsnorm.hpp"
#include "weft/cuda/check.hpp"

namespace weft {

namespace {

constexpr int kMaxThreads = 512;

// About four 16-byte vectors of the row per thread, all loaded before any is used (128 to 512
// threads): fewer threads per row let more rows' CTAs share an SM, one loading while another
// writes (bench/results: four per thread beat two on every row that fills the GPU). Plain and
// remapped RMSNorm of one width get the same count, so their sums add in the same order and their
// results stay bit-identical.
int threads_for(int64_t vectors) { return static_cast<int>(std::clamp<int64_t>((vectors / 4 + 31) / 32 * 32, 128, kMaxThreads)); }
constexpr int kVector = 8;  // bf16 per 16-byte access

struct MatrixRows {
  const uint16_t* data;
  int64_t stride;
  __device__ int64_t table_entries() const { return 0; }
  __device__ void prepare(int64_t, const uint16_t**) {}
  __device__ const uint16_t* at(int64_t row, int64_t col) const { return data + row * stride + col; }
};

// The remap fused into the load. Before the row is read, its segments' source rows are looked up
// once into shared memory (one coalesced read of the map), so a 16-byte load costs one 32-bit
// division and a shared-memory read more than the plain kernel's.
struct ReorderedRows {
  DeviceReorderMap map;
  const uint16_t* const* segment_start = nullptr;  // shared memory, one per segment of this row

  __device__ int64_t table_entries() const { return map.segments_per_row; }
  __device__ void prepare(int64_t row, const uint16_t** table) {
    const int64_t entry = (row / map.rows_per_entry) * map.segments_per_row;
    const int64_t offset = row % map.rows_per_entry;
    for (int64_t s = threadIdx.x; s < map.segments_per_row; s += blockDim.x)
      table[s] = static_cast<const uint16_t*>(map.source) + (map.first_row[entry + s] + offset) * map.segment_cols;
    segment_start = table;
  }
  __device__ const uint16_t* at(int64_t row, int64_t col) const {
    const auto c = static_cast<uint32_t>(col), width = static_cast<uint32_t>(map.segment_cols);
    const uint32_t segment = c / width;
    if (segment < map.segments_per_row) return segment_start[segment] + (c - segment * width);
    return static_cast<const uint16_t*>(map.edge_source) + row * map.edge_cols + (col - map.segments_per_row * map.segment_cols);
  }
};

// One CTA per row; the row is kept in shared memory between the sum of squares and the scaling, so
// both kernels read x from HBM once.
template <class Rows>
__global__ void __launch_bounds__(kMaxThreads) rmsnorm_kernel(Rows x, const uint16_t* weight, DeviceRegion y, float epsilon) {
  extern __shared__ uint4 row_cache[];
  const int64_t row = blockIdx.x;
  const int64_t vectors = y.cols / kVector;
  // Shared memory: the row (vectors x 16 bytes), then the rows' lookup table if any.
  x.prepare(row, reinterpret_cast<const uint16_t**>(row_cache + vectors));
  if (x.table_entries() > 0) __syncthreads();
  float sum = 0.0f;
  // kLoadsInFlight vectors per thread loaded before any is used: one at a time leaves a CTA (one row)
  // latency-bound where rows are few.
  constexpr int kLoadsInFlight = 4;
  for (int64_t base = threadIdx.x; base < vectors; base += static_cast<int64_t>(blockDim.x) * kLoadsInFlight) {
    uint4 packed[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
      if (v < vectors) packed[u] = *reinterpret_cast<const uint4*>(x.at(row, v * kVector));
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
      if (v >= vectors) continue;
      row_cache[v] = packed[u];
      const auto* values = reinterpret_cast<const __nv_bfloat162*>(&packed[u]);
#pragma unroll
      for (int i = 0; i < kVector / 2; ++i) {
        const float2 f = __bfloat1622float2(values[i]);
        sum += f.x * f.x + f.y * f.y;
      }
    }
  }
  __shared__ float warp_sums[kMaxThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
  const float scale = rsqrtf(total / static_cast<float>(y.cols) + epsilon);
  auto* out = static_cast<uint16_t*>(y.data) + row * y.stride;
  for (int64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
    const uint4 packed = row_cache[v];
    const uint4 w_packed = *reinterpret_cast<const uint4*>(weight + v * kVector);
    const auto* values = reinterpret_cast<const __nv_bfloat162*>(&packed);
    const auto* w = reinterpret_cast<const __nv_bfloat162*>(&w_packed);
    uint4 result;
    auto* r = reinterpret_cast<__nv_bfloat162*>(&result);
    for (int i = 0; i < kVector / 2; ++i) {
      const float2 f = __bfloat1622float2(values[i]);
      const float2 g = __bfloat1622float2(w[i]);
      r[i] = __floats2bfloat162_rn(f.x * scale * g.x, f.y * scale * g.y);
    }
    *reinterpret_cast<uint4*>(out + v * kVector) = result;
  }
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void require(bool ok, const std::string& what, const std::string& why) {
  if (!ok) throw std::invalid_argument(what + ": " + why + " (16-byte accesses need 8-element multiples and 16-byte aligned pointers)");
}

template <class Rows>
void launch(const Rows& x, int64_t table_entries, const void* weight, const DeviceRegion& y, float epsilon, cudaStream_t stream, const char* what) {
  require(y.cols % kVector == 0, what, "cols " + std::to_string(y.cols) + " is not a multiple of 8");
  require(y.stride % kVector == 0 && aligned(y.data) && aligned(weight), what, "y or weight misaligned (y stride " + std::to_string(y.stride) + ")");
  if (y.rows == 0) return;
  const size_t cache_bytes = static_cast<size_t>(y.cols) * sizeof(uint16_t) + static_cast<size_t>(table_entries) * sizeof(void*);
  if (cache_bytes > 48 * 1024)
    WEFT_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_kernel<Rows>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cache_bytes)));
  require(y.rows <= 0x7fffffff, what, "too many rows for one CTA each: " + std::to_string(y.rows));
  rmsnorm_kernel<Rows><<<static_cast<unsigned>(y.rows), threads_for(y.cols / kVector), cache_bytes, stream>>>(x, static_cast<const uint16_t*>(weight), y,
                                                                                                        epsilon);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rmsnorm_bf16(const DeviceRegion& x, const void* weight, const DeviceRegion& y, float epsilon, cudaStream_t stream) {
  require(x.rows == y.rows && x.cols == y.cols, "rmsnorm_bf16", "x is " + std::to_string(x.rows) + "x" + std::to_string(x.cols) +
                                                                      ", y " + std::to_string(y.rows) + "x" + std::to_string(y.cols));
  require(x.stride % kVector == 0 && aligned(x.data), "rmsnorm_bf16", "x misaligned (stride " + std::to_string(x.stride) + ")");
  launch(MatrixRows{static_cast<const uint16_t*>(x.data), x.stride}, 0, weight, y, epsilon, stream, "rmsnorm_bf16");
}

void rmsnorm_reordered_bf16(const DeviceReorderMap& x, const void* weight, const DeviceRegion& y, float epsilon, cudaStream_t stream) {
  const char* what = "rmsnorm_reordered_bf16";
  require(x.segment_cols % kVector == 0 && x.edge_cols % kVector == 0, what,
          "segment width " + std::to_string(x.segment_cols) + ", edge width " + std::to_string(x.edge_cols));
  require(x.segment_cols * x.segments_per_row + x.edge_cols == y.cols, what,
          "the map covers " + std::to_string(x.segment_cols * x.segments_per_row + x.edge_cols) + " columns, y has " + std::to_string(y.cols));
  require(aligned(x.source) && (x.edge_cols == 0 || aligned(x.edge_source)) && x.rows_per_entry >= 1, what, "source or edge misaligned");
  require(x.segment_cols * x.segments_per_row <= 0xffffffffLL, what, "rows wider than 32-bit column indices");
  launch(ReorderedRows{x, nullptr}, x.segments_per_row, weight, y, epsilon, stream, what);
}

}  // namespace weft
