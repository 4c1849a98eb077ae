// The companion kernel (weft/kernels/tile_program.hpp), written with TileLink's primitives.
#include <cuda_bf16.h>

#include <algorithm>

#include "weft/kernels/tile_program.hpp"
#include "weft/runtime/cuda_check.hpp"
#include "weft/tile/tilelink.cuh"

namespace weft {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t add_acq_rel_system(uint64_t* address, uint64_t increment) {
  uint64_t old;
  asm volatile("atom.acq_rel.sys.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(address), "l"(increment) : "memory");
  return old;
}

__device__ __forceinline__ tile::TileBox box_of(const TileProgramLaunch& launch, const TileProgramRegion& r, int64_t row, int64_t rows) {
  return tile::TileBox{static_cast<uint16_t*>(launch.bases[r.base]) + r.offset + row * r.stride, rows, r.cols, r.stride};
}

// dst = sum of sources (+ dst), fp32 accumulation, 8 elements per 16-byte access where all allow.
__device__ void reduce_piece(const tile::TileBox& dst, const tile::TileBox* srcs, int count, bool accumulate) {
  bool vectors = dst.cols % 8 == 0 && dst.stride % 8 == 0 && reinterpret_cast<uintptr_t>(dst.data) % 16 == 0;
  for (int s = 0; s < count; ++s) vectors = vectors && srcs[s].stride % 8 == 0 && reinterpret_cast<uintptr_t>(srcs[s].data) % 16 == 0;
  auto* out = static_cast<__nv_bfloat16*>(dst.data);
  if (vectors) {
    const int64_t per_row = dst.cols / 8;
    for (int64_t v = threadIdx.x; v < dst.rows * per_row; v += blockDim.x) {
      const int64_t r = v / per_row, c = (v % per_row) * 8;
      float sum[8] = {};
      if (accumulate) {
        const uint4 d = *reinterpret_cast<const uint4*>(out + r * dst.stride + c);
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&d);
        for (int e = 0; e < 8; ++e) sum[e] = __bfloat162float(h[e]);
      }
      for (int s = 0; s < count; ++s) {
        const uint4 x = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(srcs[s].data) + r * srcs[s].stride + c);
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&x);
        for (int e = 0; e < 8; ++e) sum[e] += __bfloat162float(h[e]);
      }
      uint4 result;
      auto* h = reinterpret_cast<__nv_bfloat16*>(&result);
      for (int e = 0; e < 8; ++e) h[e] = __float2bfloat16(sum[e]);
      *reinterpret_cast<uint4*>(out + r * dst.stride + c) = result;
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < dst.rows * dst.cols; i += blockDim.x) {
    const int64_t r = i / dst.cols, c = i % dst.cols;
    float sum = accumulate ? __bfloat162float(out[r * dst.stride + c]) : 0.0f;
    for (int s = 0; s < count; ++s) sum += __bfloat162float(static_cast<const __nv_bfloat16*>(srcs[s].data)[r * srcs[s].stride + c]);
    out[r * dst.stride + c] = __float2bfloat16(sum);
  }
}

__global__ void __launch_bounds__(kThreads) tile_program_kernel(const __grid_constant__ TileProgramLaunch launch) {
  __shared__ int64_t ticket;
  const tile::WaitPolicy policy{launch.wait_timeout_ns, launch.error, tile::kWaitInTileProgram};
  int item = 0;  // tickets only grow, so each CTA's item cursor only moves forward
  for (;;) {
    if (threadIdx.x == 0) ticket = static_cast<int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(launch.counters), 1ull));
    __syncthreads();
    const int64_t unit = ticket;
    if (unit >= launch.unit_count) return;
    while (item + 1 < launch.item_count && launch.items[item + 1].first_unit <= unit) ++item;
    const TileProgramItem& it = launch.items[item];
    const int64_t piece = unit - it.first_unit;
    if (threadIdx.x == 0) {
      bool ok = true;
      // The steps' stream order: the item before must be complete (all of its pieces).
      if (item > 0) {
        ok = tile::wait_at_least<false>(launch.counters + item, kTileProgramOrderSignal, static_cast<uint64_t>(launch.items[item - 1].pieces), policy,
                                       it.step) && ok;
      }
      for (int w = 0; w < it.wait_count; ++w)
        ok = tile::wait_at_least<true>(launch.wait_signals + it.wait_signal[w], it.wait_signal[w], it.wait_value[w], policy, it.step) && ok;
      (void)ok;  // a timed-out wait is in the record; the piece still runs, so that nothing hangs
    }
    __syncthreads();
    const int64_t row = piece * it.piece_rows;
    const int64_t rows = max(int64_t{0}, min(static_cast<int64_t>(it.piece_rows), it.dst.rows - row));
    const tile::TileBox dst = box_of(launch, it.dst, row, rows);
    if (it.kind == TileProgramItem::sync) {
      // nothing to move: the item's waits and notifies are all it does
    } else if (it.kind == TileProgramItem::copy) {
      tile::tile_copy(dst, box_of(launch, it.srcs[0], row, rows));
    } else {
      tile::TileBox srcs[kMaxReduceSources];
      for (int s = 0; s < it.source_count; ++s) srcs[s] = box_of(launch, it.srcs[s], row, rows);
      reduce_piece(dst, srcs, it.source_count, it.accumulate != 0);
    }
    __syncthreads();  // every thread's stores of the piece before thread 0's release
    if (threadIdx.x == 0) {
      // acq_rel: releases this CTA's stores and acquires those of the CTAs that completed earlier
      // pieces, so that the last one's notify (cumulative) publishes them all.
      if (add_acq_rel_system(launch.counters + 1 + item, 1) + 1 == static_cast<uint64_t>(it.pieces))
        for (int n = 0; n < it.notify_count; ++n) tile::add_release_system(it.notify[n], it.notify_increment[n]);
    }
  }
}

}  // namespace

int64_t plan_tile_program_pieces(std::vector<TileProgramItem>& items, int64_t piece_bytes) {
  int64_t units = 0;
  for (TileProgramItem& it : items) {
    const int64_t row_bytes = std::max<int64_t>(it.dst.cols * 2 * std::max(1, it.source_count), 1);
    it.piece_rows = static_cast<int32_t>(std::clamp<int64_t>(piece_bytes / row_bytes, 1, std::max<int64_t>(it.dst.rows, 1)));
    it.first_unit = units;
    it.pieces = std::max<int64_t>((it.dst.rows + it.piece_rows - 1) / it.piece_rows, 1);
    units += it.pieces;
  }
  return units;
}

void launch_tile_program(const TileProgramLaunch& launch, cudaStream_t stream) {
  if (launch.item_count <= 0) return;
  WEFT_CUDA_CHECK(cudaMemsetAsync(launch.counters, 0, static_cast<size_t>(launch.item_count + 1) * sizeof(uint64_t), stream));
  tile_program_kernel<<<std::max(launch.ctas, 1), kThreads, 0, stream>>>(launch);
  WEFT_CUDA_CHECK(cudaGetLastError());
}

void preload_tile_program_kernel() {
  cudaFuncAttributes attributes;
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, tile_program_kernel));
}

}  // namespace weft
