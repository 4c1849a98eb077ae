#include <cuda_bf16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
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

// e4m3 bits: a random sign, exponent field 4..10 (2^-3 to 2^3 with the bias of 7) and mantissa, so
// never NaN (exponent 15 with mantissa 7) nor subnormal.
__global__ void fill_random_e4m3_kernel(uint8_t* data, int64_t count, uint64_t seed) {
  for (int64_t i = global_index(); i < count; i += global_stride()) {
    const uint64_t bits = mix(seed * 0x100000001b3ULL + static_cast<uint64_t>(i));
    const uint32_t sign = static_cast<uint32_t>(bits >> 63), exponent = 4 + static_cast<uint32_t>((bits >> 32) % 7), mantissa = static_cast<uint32_t>(bits >> 40) & 7;
    data[i] = static_cast<uint8_t>(sign << 7 | exponent << 3 | mantissa);
  }
}

static_assert(kMaxReduceSources <= tile::kMaxTileReduceSources, "reduce_bf16's sources must fit tile_reduce's");

struct ReduceArgs {
  DeviceRegion dst;
  DeviceRegion srcs[kMaxReduceSources];
  int source_count;
  bool accumulate;
  bool vectors;  // every region 16-byte aligned with 8-element strides and columns
};

__device__ __forceinline__ tile::TileBox box_of(const DeviceRegion& r) { return tile::TileBox{r.data, r.rows, r.cols, r.stride}; }

// How a region is cut over CTAs: blockIdx.y takes `rows_per_block` rows, blockIdx.x
// `cols_per_piece` columns of them (host-side arithmetic; no division on the device).
struct Cut {
  int64_t rows_per_block = 1, cols_per_piece = 1;
  dim3 grid;
  __device__ tile::TileBox piece(const tile::TileBox& b) const {
    const int64_t row = blockIdx.y * rows_per_block, col = blockIdx.x * cols_per_piece;
    return b.sub(row, col, min(rows_per_block, b.rows - row), min(cols_per_piece, b.cols - col));
  }
};

bool vectorizable(const DeviceRegion& r) { return r.stride % 8 == 0 && reinterpret_cast<uintptr_t>(r.data) % 16 == 0; }
bool contiguous(const DeviceRegion& r) { return r.rows == 1 || r.stride == r.cols; }
DeviceRegion flattened(const DeviceRegion& r) { return DeviceRegion{r.data, 1, r.rows * r.cols, r.rows * r.cols}; }

// About `piece_bytes` of traffic per CTA, at most `max_ctas` CTAs (2,048 when 0): enough CTAs to
// cover the GPU several times over, each with enough vectors in flight; rows are never split below
// 8 columns (one 16-byte vector) where `vectors`.
constexpr int64_t kCopyPieceBytes = 64 * 1024;
constexpr int64_t kReducePieceBytes = 64 * 1024;
Cut cut_for(int64_t rows, int64_t cols, int64_t bytes, bool vectors, int max_ctas, int64_t piece_bytes = kCopyPieceBytes) {
  const int64_t limit = max_ctas > 0 ? max_ctas : 2048;
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(limit, bytes / piece_bytes));
  Cut cut;
  if (rows >= pieces) {
    cut.rows_per_block = (rows + pieces - 1) / pieces;
    cut.cols_per_piece = cols;
  } else {
    const int64_t per_row = pieces / rows, align = vectors ? 8 : 1;  // rows x per_row <= pieces (max_ctas holds)
    cut.rows_per_block = 1;
    cut.cols_per_piece = std::max<int64_t>(align, ((cols + per_row - 1) / per_row + align - 1) / align * align);
  }
  cut.grid = dim3(static_cast<unsigned>((cols + cut.cols_per_piece - 1) / cut.cols_per_piece),
                  static_cast<unsigned>((rows + cut.rows_per_block - 1) / cut.rows_per_block));
  return cut;
}

// S > 0: exactly S sources, unrolled (their pointers stay in registers and the parameter space:
// an array of sources indexed at run time would live in local memory, and copying the arguments
// there cost more traffic than the reduction itself); S == 0: any count. __grid_constant__: the
// arguments are read where they are, never copied per thread.
template <int S>
__global__ void reduce_kernel(const __grid_constant__ ReduceArgs args, Cut cut) {
  constexpr int kUnroll = tile::kReduceUnroll;
  const int sources = S > 0 ? S : args.source_count;
  const int64_t row0 = blockIdx.y * cut.rows_per_block, col0 = blockIdx.x * cut.cols_per_piece;
  const int64_t rows = min(cut.rows_per_block, args.dst.rows - row0), cols = min(cut.cols_per_piece, args.dst.cols - col0);
  auto* out = static_cast<uint16_t*>(args.dst.data) + row0 * args.dst.stride + col0;
  if (!args.vectors) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float sum = args.accumulate ? __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(out)[r * args.dst.stride + c]) : 0.0f;
#pragma unroll
        for (int s = 0; s < (S > 0 ? S : kMaxReduceSources); ++s)
          if (s < sources)
            sum += __bfloat162float(static_cast<const __nv_bfloat16*>(args.srcs[s].data)[(row0 + r) * args.srcs[s].stride + col0 + c]);
        reinterpret_cast<__nv_bfloat16*>(out)[r * args.dst.stride + c] = __float2bfloat16(sum);
      }
    return;
  }
  const auto per_row = static_cast<uint32_t>(cols / 8), count = static_cast<uint32_t>(rows * (cols / 8));
  for (uint32_t base = threadIdx.x; base < count; base += blockDim.x * kUnroll) {
    float sum[kUnroll][8];
    uint32_t row[kUnroll], col[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * blockDim.x;
      // One row (a contiguous region cut into column pieces): no division at all.
      row[u] = rows == 1 ? 0 : i / per_row;
      col[u] = (i - row[u] * per_row) * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[u][e] = 0.0f;
      if (args.accumulate && i < count) tile::add_bf16_vector(sum[u], *reinterpret_cast<const uint4*>(out + row[u] * args.dst.stride + col[u]));
    }
#pragma unroll
    for (int s = 0; s < (S > 0 ? S : kMaxReduceSources); ++s) {
      if (s >= sources) break;
      const auto* from = static_cast<const uint16_t*>(args.srcs[s].data) + row0 * args.srcs[s].stride + col0;
      uint4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (base + u * blockDim.x < count) x[u] = *reinterpret_cast<const uint4*>(from + row[u] * args.srcs[s].stride + col[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (base + u * blockDim.x < count) tile::add_bf16_vector(sum[u], x[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * blockDim.x < count) *reinterpret_cast<uint4*>(out + row[u] * args.dst.stride + col[u]) = tile::bf16_vector_of(sum[u]);
  }
}

// A flat run of vectors by the whole grid, each thread every grid-size-th pair: the next pair of
// every source is loaded before this pair's sums are stored, so that loads stay in flight while a
// thread adds and stores (on H100, cold L2, 4 slots of 6-32 MiB: 96-104% of a memcpy of the same
// bytes, the per-CTA pieces 92-102%: bench/results).
template <int S>
__global__ void flat_reduce_kernel(const __grid_constant__ ReduceArgs args, int64_t count) {
  constexpr int kUnroll = tile::kReduceUnroll;
  const int64_t step = global_stride();
  auto* out = static_cast<uint4*>(args.dst.data);
  uint4 x[S + 1][kUnroll];  // the sources' vectors, then dst's where accumulating
  const auto load = [&](int64_t at) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = at + u * step;
      if (i >= count) continue;
#pragma unroll
      for (int s = 0; s < S; ++s) x[s][u] = static_cast<const uint4*>(args.srcs[s].data)[i];
      if (args.accumulate) x[S][u] = out[i];
    }
  };
  int64_t base = global_index();
  load(base);
  while (base < count) {
    float sum[kUnroll][8];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[u][e] = 0.0f;
#pragma unroll
      for (int s = 0; s < S; ++s) tile::add_bf16_vector(sum[u], x[s][u]);
      if (args.accumulate) tile::add_bf16_vector(sum[u], x[S][u]);
    }
    const int64_t next = base + kUnroll * step;
    load(next);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * step < count) out[base + u * step] = tile::bf16_vector_of(sum[u]);
    base = next;
  }
}

// The reduction kernel for `sources` (per-CTA pieces, or grid-stride over a flat run): an
// instantiation per count 1-8, reduce_kernel<0> for any count (no flat one: nullptr).
template <int... S>
const void* reduce_kernel_among(int sources, bool flat, std::integer_sequence<int, S...>) {
  const void* found = flat ? nullptr : reinterpret_cast<const void*>(reduce_kernel<0>);
  ((sources == S + 1 ? (found = flat ? reinterpret_cast<const void*>(flat_reduce_kernel<S + 1>) : reinterpret_cast<const void*>(reduce_kernel<S + 1>))
                     : found),
   ...);
  return found;
}
const void* reduce_kernel_for(int sources, bool flat = false) { return reduce_kernel_among(sources, flat, std::make_integer_sequence<int, 8>{}); }

// CTAs of `kernel` (kThreads threads each) the current GPU holds at once: asked once per device
// and kernel (a call's enqueue must stay cheap).
int resident_ctas(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, int> known;
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  auto [it, fresh] = known.try_emplace({device, kernel}, 0);
  if (fresh) {
    int per_sm = 0, sms = 0;
    WEFT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    it->second = std::max(1, per_sm * sms);
  }
  return it->second;
}

// dst row i = src row source_rows[i]: each CTA a block of rows, its vectors numbered row-major (one
// 32-bit division per vector), 16-byte accesses where the regions allow.
// Index: int64_t (a plan's listed rows, uploaded) or int32_t (a route's table, written on the device).
template <class Index>
__global__ void permute_rows_kernel(DeviceRegion dst, DeviceRegion src, const Index* source_rows, int64_t rows_per_block, bool vectors) {
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t rows = min(rows_per_block, dst.rows - first_row);
  const auto* from = static_cast<const uint16_t*>(src.data);
  auto* to = static_cast<uint16_t*>(dst.data);
  if (vectors) {
    const auto per_row = static_cast<uint32_t>(dst.cols / 8), count = static_cast<uint32_t>(rows * (dst.cols / 8));
    constexpr int kUnroll = tile::kCopyUnroll;
    for (uint32_t base = threadIdx.x; base < count; base += blockDim.x * kUnroll) {
      uint4 v[kUnroll];
      int64_t at[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t i = base + u * blockDim.x;
        if (i >= count) continue;
        const uint32_t r = i / per_row, c = (i - r * per_row) * 8;
        const int64_t row = first_row + r;
        at[u] = row * dst.stride + c;
        v[u] = *reinterpret_cast<const uint4*>(from + static_cast<int64_t>(source_rows[row]) * src.stride + c);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (base + u * blockDim.x < count) *reinterpret_cast<uint4*>(to + at[u]) = v[u];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = first_row + r, from_row = static_cast<int64_t>(source_rows[row]);
    for (int64_t c = threadIdx.x; c < dst.cols; c += blockDim.x) to[row * dst.stride + c] = from[from_row * src.stride + c];
  }
}

// A warp per destination row: its top-k source rows, weighted, summed in fp32, 16-byte accesses
// where the regions allow.
template <class Index>
__global__ void combine_rows_kernel(DeviceRegion dst, DeviceRegion src, DeviceRegion weights, const Index* source_rows, int topk, bool vectors) {
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; row < dst.rows; row += static_cast<int64_t>(gridDim.x) * warps) {
    auto* out = static_cast<__nv_bfloat16*>(dst.data) + row * dst.stride;
    const auto* w = static_cast<const __nv_bfloat16*>(weights.data) + row * weights.stride;
    const Index* from_rows = source_rows + row * topk;
    if (vectors) {
      // kUnroll vectors per lane per source in flight.
      constexpr int kUnroll = 4;
      const int64_t per_row = dst.cols / 8;
      for (int64_t base = lane; base < per_row; base += 32 * kUnroll) {
        float sum[kUnroll][8];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int e = 0; e < 8; ++e) sum[u][e] = 0.0f;
        for (int j = 0; j < topk; ++j) {
          const auto* from = static_cast<const __nv_bfloat16*>(src.data) + from_rows[j] * src.stride;
          const float weight = __bfloat162float(w[j]);
          uint4 x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            if (base + 32 * u < per_row) x[u] = *reinterpret_cast<const uint4*>(from + (base + 32 * u) * 8);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            if (base + 32 * u >= per_row) continue;
            const auto* h = reinterpret_cast<const __nv_bfloat162*>(&x[u]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 f = __bfloat1622float2(h[e]);
              sum[u][2 * e] += weight * f.x;
              sum[u][2 * e + 1] += weight * f.y;
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + 32 * u < per_row) *reinterpret_cast<uint4*>(out + (base + 32 * u) * 8) = tile::bf16_vector_of(sum[u]);
      }
      continue;
    }
    for (int64_t c = lane; c < dst.cols; c += 32) {
      float sum = 0.0f;
      for (int j = 0; j < topk; ++j)
        sum += __bfloat162float(w[j]) * __bfloat162float(static_cast<const __nv_bfloat16*>(src.data)[from_rows[j] * src.stride + c]);
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

__global__ void copy_kernel(DeviceRegion dst, DeviceRegion src, Cut cut) { tile::tile_copy(cut.piece(box_of(dst)), cut.piece(box_of(src))); }
// A flat run of `count` vectors by the whole grid, each thread every grid-size-th vector.
__global__ void flat_copy_kernel(uint4* to, const uint4* from, int64_t count) {
  tile::copy_vectors(reinterpret_cast<uint16_t*>(to), tile::FlatRun{}, reinterpret_cast<const uint16_t*>(from), tile::FlatRun{}, count,
                     static_cast<int>(global_index()), static_cast<int>(global_stride()));
}

__global__ void signal_add_kernel(unsigned long long* counter, unsigned long long increment) {
  // Stream order already finished the earlier work; the fence makes its writes visible system-wide
  // before the counter moves (release).
  __threadfence_system();
  atomicAdd_system(counter, increment);
}

// One warp. The stream's earlier work is finished (stream order); the fence makes its writes visible
// system-wide before this rank's arrival moves on any peer (release); each peer's arrival is then
// awaited with an acquire, bounded.
__global__ void device_barrier_kernel(DeviceBarrier barrier) {
  __shared__ uint64_t epoch;
  if (threadIdx.x == 0) epoch = ++*barrier.epoch;
  __syncthreads();
  const int slot = static_cast<int>(epoch & 1) * barrier.world;
  // The signature is stored before the release below, so a peer that sees the arrival reads it.
  for (int q = static_cast<int>(threadIdx.x); q < barrier.world; q += static_cast<int>(blockDim.x))
    if (q != barrier.rank) *reinterpret_cast<volatile uint64_t*>(barrier.signatures_on[q] + slot + barrier.rank) = barrier.signature;
  __threadfence_system();
  for (int q = static_cast<int>(threadIdx.x); q < barrier.world; q += static_cast<int>(blockDim.x))
    if (q != barrier.rank) atomicAdd_system(reinterpret_cast<unsigned long long*>(barrier.arrivals_on[q] + barrier.rank), 1ull);
  const tile::WaitPolicy policy{barrier.timeout_ns, barrier.error, tile::kWaitInBarrier};
  for (int q = static_cast<int>(threadIdx.x); q < barrier.world; q += static_cast<int>(blockDim.x)) {
    if (q == barrier.rank || !tile::wait_at_least<true>(barrier.arrivals_on[barrier.rank] + q, q, epoch, policy, barrier.rank)) continue;
    const uint64_t theirs = *reinterpret_cast<const volatile uint64_t*>(barrier.signatures_on[barrier.rank] + slot + q);
    if (theirs != barrier.signature) tile::record_timeout(barrier.error, tile::kOtherCallInBarrier, q, barrier.rank, barrier.signature, theirs);
  }
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

void fill_random_e4m3(void* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  if (count <= 0) return;
  fill_random_e4m3_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<uint8_t*>(data), count, seed);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void reduce_bf16(const DeviceRegion& dst, const DeviceRegion* srcs, int source_count, bool accumulate, cudaStream_t stream) {
  if (source_count > kMaxReduceSources)
    throw CudaError("reduce_bf16: " + std::to_string(source_count) + " sources, at most " + std::to_string(kMaxReduceSources));
  if (dst.rows * dst.cols <= 0) return;
  ReduceArgs args{};
  args.dst = dst;
  bool flat = contiguous(dst), vectors = vectorizable(dst) && dst.cols % 8 == 0;
  for (int s = 0; s < source_count; ++s) {
    args.srcs[s] = srcs[s];
    flat = flat && contiguous(srcs[s]);
    vectors = vectors && vectorizable(srcs[s]);
  }
  // Regions whose rows are contiguous everywhere are one long row, cut into column pieces.
  if (flat) {
    args.dst = flattened(dst);
    for (int s = 0; s < source_count; ++s) args.srcs[s] = flattened(srcs[s]);
  }
  args.source_count = source_count;
  args.accumulate = accumulate;
  args.vectors = vectors && args.dst.cols % 8 == 0 && args.dst.rows * (args.dst.cols / 8) < (int64_t{1} << 32);
  const int64_t bytes = args.dst.rows * args.dst.cols * 2 * (source_count + 1 + (accumulate ? 1 : 0));
  if (const void* kernel = reduce_kernel_for(source_count, true); kernel != nullptr && args.vectors && args.dst.rows == 1) {
    const int64_t count = args.dst.cols / 8, per_cta = int64_t{kThreads} * tile::kReduceUnroll;
    const int64_t ctas = std::min<int64_t>(resident_ctas(kernel), (count + per_cta - 1) / per_cta);
    void* parameters[] = {&args, const_cast<int64_t*>(&count)};
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), parameters, 0, stream));
    return;
  }
  Cut cut = cut_for(args.dst.rows, args.dst.cols, bytes, args.vectors, 0, kReducePieceBytes);
  if (args.vectors && args.dst.rows == 1) {
    // One long row of more than 8 sources: as many CTAs as the GPU holds at once (a second,
    // partial wave of CTAs leaves most SMs idle at its end), each a whole number of passes of all
    // its threads over their unrolled vectors, so that none ends on a pass that leaves most of its
    // threads idle.
    constexpr int64_t kPass = 8 * kThreads * tile::kReduceUnroll;  // elements
    const int64_t passes = (args.dst.cols + kPass - 1) / kPass;
    const int64_t ctas = std::min<int64_t>(passes, resident_ctas(reduce_kernel_for(source_count)));
    cut.cols_per_piece = (passes + ctas - 1) / ctas * kPass;
    cut.grid = dim3(static_cast<unsigned>((args.dst.cols + cut.cols_per_piece - 1) / cut.cols_per_piece), 1);
  }
  void* parameters[] = {&args, &cut};
  WEFT_CUDA_CHECK(cudaLaunchKernel(reduce_kernel_for(source_count), cut.grid, dim3(kThreads), parameters, 0, stream));
}

namespace {

template <class Index>
void permute_rows(const DeviceRegion& dst, const DeviceRegion& src, const Index* source_rows, cudaStream_t stream) {
  if (dst.rows * dst.cols <= 0) return;
  const bool vectors = dst.cols % 8 == 0 && vectorizable(dst) && vectorizable(src) && dst.rows * (dst.cols / 8) < (int64_t{1} << 32);
  const Cut cut = cut_for(dst.rows, dst.cols, dst.rows * dst.cols * 4, vectors, 0);
  permute_rows_kernel<<<cut.grid.y, kThreads, 0, stream>>>(dst, src, source_rows, cut.rows_per_block, vectors);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

template <class Index>
void combine_rows(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const Index* source_rows, int topk,
                  cudaStream_t stream) {
  if (dst.rows <= 0 || dst.cols <= 0) return;
  const bool vectors = dst.cols % 8 == 0 && vectorizable(dst) && vectorizable(src);
  const int64_t ctas = (dst.rows + kThreads / 32 - 1) / (kThreads / 32);
  combine_rows_kernel<<<static_cast<int>(ctas < 65535 ? ctas : 65535), kThreads, 0, stream>>>(dst, src, weights, source_rows, topk, vectors);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void permute_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const int64_t* source_rows, cudaStream_t stream) {
  permute_rows(dst, src, source_rows, stream);
}
void permute_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const int32_t* source_rows, cudaStream_t stream) {
  permute_rows(dst, src, source_rows, stream);
}
void combine_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const int64_t* source_rows, int topk,
                       cudaStream_t stream) {
  combine_rows(dst, src, weights, source_rows, topk, stream);
}
void combine_rows_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceRegion& weights, const int32_t* source_rows, int topk,
                       cudaStream_t stream) {
  combine_rows(dst, src, weights, source_rows, topk, stream);
}

void move_boxes_bf16(const DeviceRegion& dst, const DeviceRegion& src, const DeviceBoxMove* moves, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  const int blocks = static_cast<int>(count < 65535 ? count : 65535);
  move_boxes_kernel<<<blocks, kThreads, 0, stream>>>(dst, src, moves, count);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void copy_bf16(const DeviceRegion& dst, const DeviceRegion& src, int max_ctas, cudaStream_t stream) {
  if (dst.rows <= 0 || dst.cols <= 0) return;
  DeviceRegion to = dst, from = src;
  if (contiguous(dst) && contiguous(src)) {
    to = flattened(dst);
    from = flattened(src);
  }
  const bool vectors = to.cols % 8 == 0 && vectorizable(to) && vectorizable(from);
  if (vectors && to.rows == 1) {
    // One flat run: a grid the GPU holds at once, striding over the run (half the resident CTAs,
    // 4 of 256 threads per SM, beat both full occupancy and a CTA per 32 KiB piece on H200 at
    // 6-64 MiB, cold L2: bench/results).
    const int64_t count = to.cols / 8;
    int64_t ctas = std::max(1, resident_ctas(reinterpret_cast<const void*>(flat_copy_kernel)) / 2);
    if (max_ctas > 0) ctas = std::min<int64_t>(ctas, max_ctas);
    constexpr int64_t kPerCta = int64_t{kThreads} * tile::kCopyBatch;  // vectors of one pass
    ctas = std::min<int64_t>(ctas, (count + kPerCta - 1) / kPerCta);
    flat_copy_kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(static_cast<uint4*>(to.data), static_cast<const uint4*>(from.data), count);
    WEFT_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const Cut cut = cut_for(to.rows, to.cols, to.rows * to.cols * 4, vectors, max_ctas);
  copy_kernel<<<cut.grid, kThreads, 0, stream>>>(to, from, cut);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void signal_add(uint64_t* counter, uint64_t increment, cudaStream_t stream) {
  signal_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(counter), increment);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void device_barrier(const DeviceBarrier& barrier, cudaStream_t stream) {
  device_barrier_kernel<<<1, 32, 0, stream>>>(barrier);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void preload_step_kernels() {
  // Asking for a kernel's attributes loads its module.
  cudaFuncAttributes attributes;
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, signal_add_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, device_barrier_kernel));
  // Also asks each reduction's occupancy here, so that a call captured into a graph finds it known.
  for (int sources = 0; sources <= kMaxReduceSources; ++sources) {
    WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reduce_kernel_for(sources)));
    (void)resident_ctas(reduce_kernel_for(sources));
    if (const void* flat = reduce_kernel_for(sources, true)) (void)resident_ctas(flat);
  }
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, permute_rows_kernel<int64_t>));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, permute_rows_kernel<int32_t>));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, move_boxes_kernel));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, combine_rows_kernel<int64_t>));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, combine_rows_kernel<int32_t>));
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, copy_kernel));
  (void)resident_ctas(reinterpret_cast<const void*>(flat_copy_kernel));
}

void accumulate_difference_bf16(const void* a, const void* b, int64_t count, double* sums, cudaStream_t stream) {
  if (count <= 0) return;
  difference_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a),
                                                                 static_cast<const __nv_bfloat16*>(b), count, sums);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace weft
