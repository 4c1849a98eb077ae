// The overlap GEMM's plain table over a whole m x n C: one entry per tile, row-major over the grid,
// each storing its rows and columns of C in place (no waits, notifies or second A operand).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "weft/kernels/overlap_gemm.hpp"

namespace weft::test_support {

inline std::vector<OverlapGemmTile> grid_table(int64_t m, int64_t n, OverlapGemmShape tile) {
  std::vector<OverlapGemmTile> table;
  for (int64_t i = 0; i * tile.tile_m < m; ++i)
    for (int64_t j = 0; j * tile.tile_n < n; ++j) {
      OverlapGemmTile e;
      e.tile_m = static_cast<int32_t>(i);
      e.tile_n = static_cast<int32_t>(j);
      e.rows = static_cast<int32_t>(std::min<int64_t>(tile.tile_m, m - i * tile.tile_m));
      e.cols = static_cast<int32_t>(std::min<int64_t>(tile.tile_n, n - j * tile.tile_n));
      e.store_row = i * tile.tile_m;
      e.store_col = j * tile.tile_n;
      table.push_back(e);
    }
  return table;
}

}  // namespace weft::test_support
