// Where a `signal` plan's result lies just before its restore steps, so that the kernel after the
// GEMM+collective can read it in place instead (flashoverlap.txt Section 3.3.5, Figure 6: "the fused
// kernel loads data based on the mapped index"). weft's RMSNorm takes such a map
// (kernels/rmsnorm.hpp); `weft bench rmsnorm` measures what the fused remap costs.
//
//   const Plan plan = plan_signal(problem, options);
//   const ReorderMap map = reorder_map(plan, rank);       // throws if the plan has no such layout
//   // element (i, j) of the result, j < map.segment_cols * map.segments_per_row:
//   //   source[map.source_row(i, j / map.segment_cols), j % map.segment_cols]
//   // else edge_source[i, j - map.segment_cols * map.segments_per_row]
//
// The map is tile level (one entry per tile: gemm_ar, gemm_rs, whose tiles stay tiles of the
// result) when every tile's rows stay together and aligned, else token level (one entry per row and
// segment: gemm_a2a, whose tokens land at rows set by the routing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/reference/host_matrix.hpp"
#include "weft/ir/plan.hpp"

namespace weft {

struct ReorderMap {
  int64_t rows = 0;              // the result on this rank
  int64_t cols = 0;
  std::string source;            // buffer of the main tiles, [*, segment_cols]
  int64_t segment_cols = 0;      // the plan's tile_n
  int64_t segments_per_row = 0;  // whole segments per result row
  int rows_per_entry = 1;        // tile level: tile_m; token level: 1
  // Source row of the first row of each entry, entry (i / rows_per_entry, segment s) at
  // (i / rows_per_entry) * segments_per_row + s.
  std::vector<int64_t> first_row;
  std::string edge_source;       // "" when cols is a whole number of segments; else [rows, edge_cols]

  int64_t edge_cols() const { return cols - segment_cols * segments_per_row; }
  int64_t source_row(int64_t row, int64_t segment) const {
    return first_row[static_cast<size_t>((row / rows_per_entry) * segments_per_row + segment)] + row % rows_per_entry;
  }
  std::string_view granularity() const { return rows_per_entry > 1 ? "tile" : "token"; }
};

// The map of rank `rank`'s result, read from the plan's box moves into its output buffer. Throws
// std::invalid_argument when the plan does not end in such moves or they do not cover the result
// exactly once.
ReorderMap reorder_map(const Plan& plan, int rank);

// The result in matrix order, from the source and edge buffers (the CPU meaning of the map).
HostMatrix apply_reorder_map(const ReorderMap& map, const HostMatrix& source, const HostMatrix* edge_source);

}  // namespace weft
