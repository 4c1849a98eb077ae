// RMSNorm over the rows of a bf16 matrix, plain or reading the matrix where a `signal` plan left it
// (FlashOverlap's remap fused into the next element-wise kernel, flashoverlap.txt Section 3.3.5 and
// Table 4). Both compute, per row, y = x * rsqrt(mean(x^2) + epsilon) * weight in fp32 with the same
// summation order, so their results are bit-identical.
//
//   rmsnorm_bf16(x, weight, y, 1e-6f, stream);                  // x in matrix order
//   rmsnorm_reordered_bf16(map_view, weight, y, 1e-6f, stream); // x as a ReorderMap describes it
//                                                               // (runtime/device_reorder_map.hpp)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "weft/kernels/elementwise.hpp"

namespace weft {

// The device side of a ReorderMap (ir/reorder_map.hpp): element (i, j), j inside the segments, is
// source[(first_row[(i / rows_per_entry) * segments_per_row + j / segment_cols] + i % rows_per_entry)
// * segment_cols + j % segment_cols]; the last edge_cols columns are edge_source[i * edge_cols + ...].
struct DeviceReorderMap {
  const void* source = nullptr;       // bf16, [*, segment_cols]
  const void* edge_source = nullptr;  // bf16, [rows, edge_cols]; null when edge_cols is 0
  const int64_t* first_row = nullptr; // device
  int64_t segment_cols = 0;
  int64_t segments_per_row = 0;
  int rows_per_entry = 1;
  int64_t edge_cols = 0;
};

// y (rows x cols) = RMSNorm of x (same shape); weight: cols bf16. Throws std::invalid_argument
// unless cols, strides and pointers allow 16-byte accesses (cols a multiple of 8).
void rmsnorm_bf16(const DeviceRegion& x, const void* weight, const DeviceRegion& y, float epsilon, cudaStream_t stream);
// The same, x read through the map; y gives the shape. Segment and edge widths must be multiples of 8.
void rmsnorm_reordered_bf16(const DeviceReorderMap& x, const void* weight, const DeviceRegion& y, float epsilon, cudaStream_t stream);

}  // namespace weft
