#include <cuda_bf16.h>

#include "weft/kernels/elementwise.hpp"
#include "weft/runtime/cuda_check.hpp"
#include "weft/tile/tilelink.cuh"

namespace weft {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t count) {
  const int64_t wanted = (count + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 8192 ? (wanted > 0 ? wanted : 1) : 8192);
}

__device__ int64_t global_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void fill_u16_kernel(uint16_t* data, int64_t count, uint16_t bits) {
  for (int64_t i = global_index(); i < count; i += global_stride()) data[i] = bits;
}

__device__ uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(__nv_bfloat16* data, int64_t count, uint64_t seed) {
  for (int64_t i = global_index(); i < count; i += global_stride()) {
    const uint64_t bits = mix(seed * 0x100000001b3ULL + static_cast<uint64_t>(i));
    const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = __float2bfloat16(2.0f * unit - 1.0f);
  }
}

struct ReduceArgs {
  DeviceRegion dst;
  DeviceRegion srcs[kMaxReduceSources];
  int source_count;
  bool accumulate;
};

__global__ void reduce_kernel(ReduceArgs args) {
  const int64_t total = args.dst.rows * args.dst.cols;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t row = i / args.dst.cols, col = i % args.dst.cols;
    auto* out = static_cast<__nv_bfloat16*>(args.dst.data) + row * args.dst.stride + col;
    float sum = args.accumulate ? __bfloat162float(*out) : 0.0f;
    for (int s = 0; s < args.source_count; ++s)
      sum += __bfloat162float(static_cast<const __nv_bfloat16*>(args.srcs[s].data)[row * args.srcs[s].stride + col]);
    *out = __float2bfloat16(sum);
  }
}

__global__ void permute_rows_kernel(DeviceRegion dst, DeviceRegion src, const int64_t* source_rows) {
  const int64_t total = dst.rows * dst.cols;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t row = i / dst.cols, col = i % dst.cols;
    static_cast<uint16_t*>(dst.data)[row * dst.stride + col] =
        static_cast<const uint16_t*>(src.data)[source_rows[row] * src.stride + col];
  }
}

// One CTA per destination row: its top-k source rows, weighted, summed in fp32.
__global__ void combine_rows_kernel(DeviceRegion dst, DeviceRegion src, DeviceRegion weights, const int64_t* source_rows, int topk) {
  for (int64_t row = blockIdx.x; row < dst.rows; row += gridDim.x) {
    auto* out = static_cast<__nv_bfloat16*>(dst.data) + row * dst.stride;
    const auto* w = static_cast<const __nv_bfloat16*>(weights.data) + row * weights.stride;
    for (int64_t c = threadIdx.x; c < dst.cols; c += blockDim.x) {
      float sum = 0.0f;
      for (int j = 0; j < topk; ++j)
        sum += __bfloat162float(w[j]) *
               __bfloat162float(static_cast<const __nv_bfloat16*>(src.data)[source_rows[row * topk + j] * src.stride + c]);
      out[c] = __float2bfloat16(sum);
    }
  }
}

// One CTA per box (TileLink's tile copy: 16-byte accesses where the boxes allow).
__global__ void move_boxes_kernel(DeviceRegion dst, DeviceRegion src, const DeviceBoxMove* moves, int64_t count) {
  for (int64_t i = blockIdx.x; i < count; i += gridDim.x) {
    const DeviceBoxMove m = moves[i];
    tile::tile_copy(tile::TileBox{static_cast<uint16_t*>(dst.data) + m.to_row * dst.stride + m.to_col, m.rows, m.cols, dst.stride},
                    tile::TileBox{static_cast<uint16_t*>(src.data) + m.from_row * src.stride + m.from_col, m.rows, m.cols, src.stride});
  }
}

// Rows in one block per CTA.
__global__ void copy_kernel(DeviceRegion dst, DeviceRegion src) {
  const int64_t per_cta = (dst.rows + gridDim.x - 1) / gridDim.x, first = blockIdx.x * per_cta;
  if (first >= dst.rows) return;
  const int64_t rows = min(per_cta, dst.rows - first);
  tile::tile_copy(tile::TileBox{static_cast<uint16_t*>(dst.data) + first * dst.stride, rows, dst.cols, dst.stride},
                  tile::TileBox{static_cast<uint16_t*>(src.data) + first * src.stride, rows, dst.cols, src.stride});
}

__global__ void signal_add_kernel(unsigned long long* counter, unsigned long long increment) {
  // Stream order already finished the earlier work; the fence makes its writes visible system-wide
  // before the counter moves (release).
  __threadfence_system();
  atomicAdd_system(counter, increment);
}

__global__ void difference_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t count, double* sums) {
  double diff = 0.0, norm = 0.0, nans = 0.0;
  for (int64_t i = global_index(); i < count; i += global_stride()) {
    const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    if (isnan(x)) {
      nans += 1.0;
      continue;
    }
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    diff += __shfl_down_sync(0xffffffffu, diff, offset);
    norm += __shfl_down_sync(0xffffffffu, norm, offset);
    nans += __shfl_down_sync(0xffffffffu, nans, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], diff);
    atomicAdd(&sums[1], norm);
    atomicAdd(&sums[2], nans);
  }
}

}  // namespace

void fill_u16(void* data, int64_t count, uint16_t bits, cudaStream_t stream) {
  if (count <= 0) return;
  fill_u16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<uint16_t*>(data), count, bits);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void fill_random_bf16(void* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  if (count <= 0) return;
  fill_random_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void reduce_bf16(const DeviceRegion& dst, const DeviceRegion* srcs, int source_count, bool accumulate, cudaStream_t stream) {
  if (source_count > kMaxReduceSources)
    throw CudaError("reduce_bf16: " + std::to_string(source_count) + " sources, at most " + std::to_string(kMaxReduceSources));
  if (dst.rows * dst.cols <= 0) return;
  ReduceArgs args{};
  args.dst = dst;
  for (int s = 0; s < source_count; ++s) args.srcs[s] = srcs[s];
  args.source_count = source_count;
  args.accumulate = accumulate;
  reduce_kernel<<<blocks_for(dst.rows * dst.cols), kThreads, 0, stream>>>(args);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void permute_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const int64_t* source_rows, cudaStream_t stream) {
  if (dst.rows * dst.cols <= 0) return;
  permute_rows_kernel<<<blocks_for(dst.rows * dst.cols), kThreads, 0, stream>>>(dst, src, source_rows);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void combine_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const int64_t* source_rows, int topk,
                       cudaStream_t stream) {
  if (dst.rows <= 0 || dst.cols <= 0) return;
  combine_rows_kernel<<<static_cast<int>(dst.rows < 65535 ? dst.rows : 65535), kThreads, 0, stream>>>(dst, src, weights, source_rows, topk);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void move_boxes_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceBoxMove* moves, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  const int blocks = static_cast<int>(count < 65535 ? count : 65535);
  move_boxes_kernel<<<blocks, kThreads, 0, stream>>>(dst, src, moves, count);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void copy_bf16(const DeviceRegion& dst, const DeviceRegion& src, int max_ctas, cudaStream_t stream) {
  if (dst.rows <= 0 || dst.cols <= 0) return;
  const int64_t limit = max_ctas > 0 ? max_ctas : 1024;
  copy_kernel<<<static_cast<int>(dst.rows < limit ? dst.rows : limit), kThreads, 0, stream>>>(dst, src);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void signal_add(uint64_t* counter, uint64_t increment, cudaStream_t stream) {
  signal_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(counter), increment);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void preload_step_kernels() {
  // Asking for a kernel's attributes loads its module.
  cudaFuncAttributes attributes;
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, signal_add_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reduce_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, permute_rows_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, move_boxes_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, combine_rows_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, copy_kernel));
}

void accumulate_difference_bf16(const void* a, const void* b, int64_t count, double* sums, cudaStream_t stream) {
  if (count <= 0) return;
  difference_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a),
                                                                 static_cast<const __nv_bfloat16*>(b), count, sums);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace weft
