// The MoE ops' routing tables as a function of the choices: what a plan's literal row lists say
// today (ir/problem.hpp's moe_rows, sequential's expert-major rows), computed from the choices alone
// so that a step of the plan can compute them per call on the GPU (docs/design/moe_device_routing.md).
// This is the host's version, the one the device's must match; it is a counting sort, as the device
// runs it: counts per (source, expert), prefix sums, then each (token, choice)'s rank in its block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft {

struct MoeRouteTables {
  // [W*M*topk]: the op layout's row of token t's j-th choice at t * topk + j (the layout of ag_moe's
  // C and moe_rs's A: by source rank, then expert, then token, then choice; MoeRows::row_of).
  std::vector<int32_t> layout_row;
  // [capacity]: for each row of the expert-major scratch (every source's rows of expert 0, then of
  // expert 1, ..., each expert's first row on a multiple of `align` where it has rows), the op
  // layout's row there, -1 on the padding between experts and after the last.
  std::vector<int32_t> expert_row;
  // [experts + 1]: expert e's rows of the scratch are [expert_first[e], expert_first[e] + count_e),
  // count_e the rows that picked e; expert_first[experts] is where the last expert's rows end.
  std::vector<int32_t> expert_first;
};

// The most (rank, expert) blocks a route on the device takes (the route kernel's shared-memory
// histogram, kernels/moe_route.hpp's kMaxMoeRouteBlocks, which the lowering asserts equal).
constexpr int kMaxRoutedBlocks = 8192;

// The scratch's rows whatever the routing: every (token, choice) plus at most align - 1 padding rows
// before each expert (sequential's padded_capacity for these sizes).
int64_t moe_route_capacity(int world, int64_t m, int topk, int experts, int64_t align);

// choices: every rank's [m, topk] choices stacked ([world * m * topk], choices[(s * m + i) * topk + j]
// the expert of rank s's token i's j-th choice, each in [0, experts)); align >= 1. Throws
// std::invalid_argument naming the first choice out of range or a size that does not match.
MoeRouteTables route_moe_rows(std::span<const int32_t> choices, int world, int64_t m, int topk, int experts, int64_t align);

// One row tile of the routed grouped GEMM with the arrival of its rows' sources, for the plans that
// overlap the tokens' arrival (docs/design/moe_routed_overlap.md): the host's version of the table a
// kernel will build per call, as route_moe_rows is the route's. Within an expert the scratch rows are
// in source order, so a tile's rows come from a contiguous range of sources, and the tile waits for
// each of them.
struct RoutedRowTile {
  int32_t expert = 0;
  int32_t row = 0;           // its first scratch row, on the tile grid
  int32_t rows = 0;          // the expert's rows from there (at most tile_m): the rows it stores
  int32_t source_first = 0;  // the sources of those rows: [source_first, source_last]
  int32_t source_last = 0;
  int32_t stage = 0;         // the latest arrival among the sources it has rows of, own rank first: max (s - rank) mod W
};

// Every row tile that holds an expert's rows (each of them n / tile_n column tiles in the GEMM's
// table), ordered by stage, then by row: the tiles whose sources arrive first come first. `t` is
// route_moe_rows(choices, world, m, topk, experts, align) with align a multiple of tile_m.
std::vector<RoutedRowTile> routed_row_tiles(const MoeRouteTables& t, int world, int64_t m, int topk, int tile_m, int rank);

}  // namespace weft
