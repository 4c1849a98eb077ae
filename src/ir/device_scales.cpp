// Where the CUDA executor (and weft::Op's caller) keeps an FP8 buffer's scales: the layouts
// cuBLASLt's scale modes read (ir/scaling.hpp, device_scale_index).
#include "weft/ir/scaling.hpp"

namespace weft {

namespace {

int64_t pad4(int64_t count) { return (count + 3) / 4 * 4; }

// A's 1x128 blocks (a scale per row and K block) as against B's 128x128.
bool per_row_blocks(const ScaleGrid& grid) { return grid.block_rows == 1 && grid.block_cols > 0; }

}  // namespace

int64_t device_scale_index(const ScaleGrid& grid, int64_t rows, int64_t cols, ScaleCell cell) {
  if (grid.block_cols == 0) return cell.row;  // tensor (row 0) or one per row
  if (per_row_blocks(grid)) return cell.col * pad4(rows) + cell.row;
  return cell.row * pad4(scale_cols(grid, cols)) + cell.col;
}

int64_t device_scale_count(const ScaleGrid& grid, int64_t rows, int64_t cols) {
  if (grid.block_cols == 0) return scale_rows(grid, rows);
  if (per_row_blocks(grid)) return scale_cols(grid, cols) * pad4(rows);
  return scale_rows(grid, rows) * pad4(scale_cols(grid, cols));
}

}  // namespace weft
