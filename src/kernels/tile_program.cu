// The companion kernel (weft/kernels/tile_program.hpp), written with TileLink's primitives.
#include <cuda_bf16.h>

#include <algorithm>

#include "weft/kernels/tile_program.hpp"
#include "weft/cuda/check.hpp"
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
      tile::tile_reduce(dst, srcs, it.source_count, it.accumulate != 0);
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

int64_t plan_tile_program_pieces(std::vector<TileProgramItem>& items, int ctas, int64_t piece_bytes) {
  int64_t units = 0;
  for (TileProgramItem& it : items) {
    const int64_t row_bytes = std::max<int64_t>(it.dst.cols * 2 * std::max(1, it.source_count), 1);
    // Pieces of at most piece_bytes, and at least one per CTA where the item has the rows (items
    // run one after another, so an item cut in fewer pieces than CTAs leaves CTAs idle), but not
    // below kMinPieceBytes, whose per-piece synchronization would dominate.
    constexpr int64_t kMinPieceBytes = 16 * 1024;
    const int64_t item_bytes = row_bytes * it.dst.rows;
    const int64_t bytes = std::clamp<int64_t>(item_bytes / std::max(ctas, 1), std::min(kMinPieceBytes, piece_bytes), piece_bytes);
    it.piece_rows = static_cast<int32_t>(std::clamp<int64_t>(bytes / row_bytes, 1, std::max<int64_t>(it.dst.rows, 1)));
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
