// The companion kernel (weft/kernels/tile_program.hpp), written with TileLink's primitives.
#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

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
      // The earlier items it follows must be complete (all of their pieces). An item that follows
      // every earlier one is complete only once those are: the walk back stops at the first.
      if (it.after_all) {
        for (int j = item - 1; j >= 0; --j) {
          ok = tile::wait_at_least<false>(launch.counters + 1 + j, kTileProgramOrderSignal, static_cast<uint64_t>(launch.items[j].pieces), policy,
                                         it.step) && ok;
          if (launch.items[j].after_all) break;
        }
      } else {
        for (int a = 0; a < it.after_count; ++a) {
          const int j = it.after[a];
          ok = tile::wait_at_least<false>(launch.counters + 1 + j, kTileProgramOrderSignal, static_cast<uint64_t>(launch.items[j].pieces), policy,
                                         it.step) && ok;
        }
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

namespace {

bool overlap(const TileProgramRegion& x, const TileProgramRegion& y) {
  if (x.base != y.base || x.rows <= 0 || x.cols <= 0 || y.rows <= 0 || y.cols <= 0) return false;
  const int64_t x_end = x.offset + (x.rows - 1) * x.stride + x.cols, y_end = y.offset + (y.rows - 1) * y.stride + y.cols;
  return x.offset < y_end && y.offset < x_end;
}

// Whether item `later` must follow item `earlier` for their data: one writes what the other reads
// or writes.
bool conflict(const TileProgramItem& earlier, const TileProgramItem& later) {
  if (earlier.kind == TileProgramItem::sync || later.kind == TileProgramItem::sync) return false;
  if (overlap(earlier.dst, later.dst)) return true;
  for (int s = 0; s < later.source_count; ++s)
    if (overlap(earlier.dst, later.srcs[s])) return true;
  for (int s = 0; s < earlier.source_count; ++s)
    if (overlap(later.dst, earlier.srcs[s])) return true;
  return false;
}

}  // namespace

void order_tile_program_items(std::vector<TileProgramItem>& items) {
  // ancestors[i][j]: item i runs after item j is complete (directly or through others).
  const size_t n = items.size();
  std::vector<std::vector<bool>> ancestors(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i) {
    TileProgramItem& it = items[i];
    it.after_all = 1;
    it.after_count = 0;
    std::vector<size_t> direct;
    if (it.kind != TileProgramItem::sync && it.notify_count == 0) {
      for (size_t j = 0; j < i; ++j) {
        // A join gates every step after it; an item that waits for nothing may rely on the waits of
        // the steps before it (the data they wait for); and the data each item reads or writes.
        const bool gates = items[j].kind == TileProgramItem::sync || (it.wait_count == 0 && items[j].wait_count > 0);
        if (gates || conflict(items[j], it)) direct.push_back(j);
      }
      // Keep the latest of each chain: j goes where another kept item already follows it.
      std::vector<size_t> kept;
      for (size_t j : direct) {
        bool covered = false;
        for (size_t k : direct) covered = covered || (k != j && ancestors[k][j]);
        if (!covered) kept.push_back(j);
      }
      if (kept.size() <= static_cast<size_t>(kTileProgramMaxAfter)) {
        it.after_all = 0;
        for (size_t j : kept) {
          it.after[it.after_count++] = static_cast<int32_t>(j);
          ancestors[i][j] = true;
          for (size_t a = 0; a < j; ++a) ancestors[i][a] = ancestors[i][a] || ancestors[j][a];
        }
      }
    }
    if (it.after_all)
      for (size_t j = 0; j < i; ++j) ancestors[i][j] = true;
  }
}

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
