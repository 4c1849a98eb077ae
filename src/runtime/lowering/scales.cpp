// Where a GEMM finds an FP8 operand's scales (lowering.hpp): shared by the library GEMM and the
// overlap GEMM.
#include <stdexcept>

#include "lowering.hpp"

namespace weft::lowering {

const float* scales_from(const BoundScales& s, const std::string& label, const char* operand) {
  const BoundRegion& r = s.elements;
  const int64_t row = r.offset / r.stride, col = r.offset % r.stride;
  if (s.grid.block_cols > 0 && (row != 0 || col != 0 || r.rows != s.buffer_rows || r.cols != s.buffer_cols))
    throw std::invalid_argument("CudaExecutor: GEMM step '" + label + "' reads rows " + std::to_string(row) + ".." + std::to_string(row + r.rows) +
                                " and K columns " + std::to_string(col) + ".." + std::to_string(col + r.cols) + " of its block-scaled " + operand +
                                " (a buffer of " + std::to_string(s.buffer_rows) + "x" + std::to_string(s.buffer_cols) +
                                "); the library GEMM takes block scales of whole buffers only so far");
  if (s.grid.block_cols == 0 && s.grid.block_rows == 1) return s.resolve() + row;
  return s.resolve();
}

bool is_row_scaled(const ScaleGrid& grid) { return grid.block_cols == 0 && grid.block_rows == 1; }

}  // namespace weft::lowering
