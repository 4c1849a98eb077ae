#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "weft/kernels/rmsnorm.hpp"
#include "weft/runtime/cuda_check.hpp"

namespace weft {

namespace {

constexpr int kMaxThreads = 512;

// About two 16-byte vectors of the row per thread (128 to 512 threads: 1024-thread CTAs fit two to an SM, too few to hide the
// barrier between the two passes): with one CTA per row, a wide
// row on few rows (256 x 12288) needs the whole row's loads in flight at once to stay near the copy
// roofline. Plain and remapped RMSNorm of one width get the same count, so their sums add in the
// same order and their results stay bit-identical.
int threads_for(int64_t vectors) { return static_cast<int>(std::clamp<int64_t>((vectors / 2 + 31) / 32 * 32, 128, kMaxThreads)); }
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

// Each CTA normalises rows blockIdx.x, + gridDim.x, ...; a row is kept in shared memory between
// the sum of squares and the scaling, so both kernels read x from HBM once. The grid is what fits
// on the GPU at once, so that a thread's part of the weight is loaded once and kept in registers
// over its CTA's rows (reloaded per row from L2, the weight doubled the bytes an SM reads).
constexpr int kWeightKept = 4;  // vectors of the weight a thread keeps: rows up to 4 x 8 x threads wide

template <class Rows>
__global__ void __launch_bounds__(kMaxThreads) rmsnorm_kernel(Rows x, const uint16_t* weight, DeviceRegion y, float epsilon) {
  extern __shared__ uint4 row_cache[];
  __shared__ float warp_sums[kMaxThreads / 32];
  const int64_t vectors = y.cols / kVector;
  const int64_t threads = blockDim.x;
  const bool keep = vectors <= threads * kWeightKept;
  uint4 kept[kWeightKept];
#pragma unroll
  for (int j = 0; j < kWeightKept; ++j) {
    const int64_t v = threadIdx.x + j * threads;
    if (keep && v < vectors) kept[j] = *reinterpret_cast<const uint4*>(weight + v * kVector);
  }
  for (int64_t row = blockIdx.x; row < y.rows; row += gridDim.x) {
    // The previous row's lookup table and warp sums are read by every thread before they change.
    if (row != blockIdx.x) __syncthreads();
    // Shared memory: the row (vectors x 16 bytes), then the rows' lookup table if any. Each thread
    // reads back only the vectors it wrote.
    x.prepare(row, reinterpret_cast<const uint16_t**>(row_cache + vectors));
    if (x.table_entries() > 0) __syncthreads();
    float sum = 0.0f;
    // kLoadsInFlight vectors per thread loaded before any is used: one at a time leaves a CTA (one row)
    // latency-bound where rows are few.
    constexpr int kLoadsInFlight = 4;
    for (int64_t base = threadIdx.x; base < vectors; base += threads * kLoadsInFlight) {
      uint4 packed[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t v = base + static_cast<int64_t>(u) * threads;
        if (v < vectors) packed[u] = *reinterpret_cast<const uint4*>(x.at(row, v * kVector));
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t v = base + static_cast<int64_t>(u) * threads;
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
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(threads / 32); ++w) total += warp_sums[w];
    const float scale = rsqrtf(total / static_cast<float>(y.cols) + epsilon);
    auto* out = static_cast<uint16_t*>(y.data) + row * y.stride;
    auto scaled = [&](int64_t v, const uint4& w_packed) {
      const uint4 packed = row_cache[v];
      const auto* values = reinterpret_cast<const __nv_bfloat162*>(&packed);
      const auto* w = reinterpret_cast<const __nv_bfloat162*>(&w_packed);
      uint4 result;
      auto* r = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
      for (int i = 0; i < kVector / 2; ++i) {
        const float2 f = __bfloat1622float2(values[i]);
        const float2 g = __bfloat1622float2(w[i]);
        r[i] = __floats2bfloat162_rn(f.x * scale * g.x, f.y * scale * g.y);
      }
      *reinterpret_cast<uint4*>(out + v * kVector) = result;
    };
    if (keep) {
#pragma unroll
      for (int j = 0; j < kWeightKept; ++j) {
        const int64_t v = threadIdx.x + j * threads;
        if (v < vectors) scaled(v, kept[j]);
      }
    } else {
      for (int64_t v = threadIdx.x; v < vectors; v += threads) scaled(v, *reinterpret_cast<const uint4*>(weight + v * kVector));
    }
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
  const int threads = threads_for(y.cols / kVector);
  // CTAs that fit at once, asked once per device and launch shape (the query costs host time).
  struct Fit {
    int device = -1, threads = 0;
    size_t bytes = 0;
    int64_t ctas = 0;
  };
  thread_local Fit fit;
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  if (fit.device != device || fit.threads != threads || fit.bytes != cache_bytes) {
    int per_sm = 0, sms = 0;
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_kernel<Rows>, threads, cache_bytes));
    fit = {device, threads, cache_bytes, static_cast<int64_t>(std::max(per_sm, 1)) * sms};
  }
  const int64_t ctas = std::min<int64_t>(y.rows, fit.ctas);
  rmsnorm_kernel<Rows><<<static_cast<unsigned>(ctas), threads, cache_bytes, stream>>>(x, static_cast<const uint16_t*>(weight), y, epsilon);
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
