// A hand-built plan that exercises every tile-table feature across ranks: rank r's GEMM stores each
// tile into rank (r+1)'s symmetric C, tile rows remapped (row block b lands at block nb-1-b), and
// notifies rank (r+1)'s 'received' signal per tile; rank r then waits until all of its
// predecessor's tiles have arrived. So rank r's output is rank (r-1)'s A * B^T with row blocks
// reversed. Used by the CPU tests (validation + reference executor) and the GPU tests (overlap GEMM).
#pragma once

#include "weft/reference/host_matrix.hpp"
#include "weft/ir/plan.hpp"
#include "weft/ir/tile_grid.hpp"

namespace weft::testing_support {

inline int64_t reversed_block(int64_t block, int64_t blocks) { return blocks - 1 - block; }

// m must be a multiple of tile_m (whole row blocks are swapped).
inline Plan ring_push_plan(int world, int64_t m, int64_t n, int64_t k, int tile_m = 128, int tile_n = 128) {
  Plan plan;
  plan.strategy = "test_ring_push";
  plan.problem = Problem{OpKind::gemm_ar, m, n, k, world, DType::bf16, DType::bf16, {}};
  const TileGrid grid{m, n, tile_m, tile_n};
  const int64_t blocks = m / tile_m;
  for (int r = 0; r < world; ++r) {
    const int next = (r + 1) % world;
    RankPlan rp;
    rp.rank = r;
    rp.stream_count = 1;
    rp.buffers = {BufferDecl{"A", BufferRole::input, m, k, DType::bf16, false},
                  BufferDecl{"B", BufferRole::input, n, k, DType::bf16, false},
                  BufferDecl{"C", BufferRole::output, m, n, DType::bf16, true}};
    rp.signals = {"received"};
    GemmStep gemm;
    gemm.a = Region{r, 0, Rect{0, 0, m, k}};
    gemm.b = Region{r, 1, Rect{0, 0, n, k}};
    gemm.tile_m = tile_m;
    gemm.tile_n = tile_n;
    for (int64_t index : rasterized_order(grid, Raster::along_n, 1)) {
      GemmTile t;
      t.tile = grid.tile(index);
      const int64_t block = t.tile.row / tile_m;
      t.store = Region{next, 2, Rect{reversed_block(block, blocks) * tile_m, t.tile.col, t.tile.rows, t.tile.cols}};
      t.notify = Notify{SignalRef{next, 0}, 1};
      gemm.tiles.push_back(t);
    }
    const auto tiles = static_cast<uint64_t>(gemm.tiles.size());
    Step compute{"gemm, tiles pushed to rank " + std::to_string(next), 0, Engine::gemm_epilogue, {}, {}, std::move(gemm)};
    Step arrive{"all of rank " + std::to_string((r + world - 1) % world) + "'s tiles arrived", 0, Engine::sm,
                {Wait{SignalRef{r, 0}, tiles}}, {}, JoinStep{}};
    rp.steps = {std::move(compute), std::move(arrive)};
    rp.output = Region{r, 2, Rect{0, 0, m, n}};
    plan.ranks.push_back(std::move(rp));
  }
  return plan;
}

// What rank r's output must be, from every rank's A and B.
inline HostMatrix ring_push_expected(const std::vector<RankTensors>& inputs, int rank, int tile_m = 128) {
  const int world = static_cast<int>(inputs.size());
  const HostMatrix& a = inputs.at(static_cast<size_t>((rank + world - 1) % world)).at("A");
  const HostMatrix& b = inputs.at(static_cast<size_t>((rank + world - 1) % world)).at("B");
  const int64_t blocks = a.rows / tile_m;
  HostMatrix c(a.rows, b.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < a.cols; ++p) sum += static_cast<double>(a.at(i, p)) * b.at(j, p);
      c.at(reversed_block(i / tile_m, blocks) * tile_m + i % tile_m, j) = static_cast<float>(sum);
    }
  return c;
}

}  // namespace weft::testing_support
