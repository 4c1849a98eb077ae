// The MoE routing tables computed on the device from the choices (docs/design/moe_device_routing.md):
// the same tables as plan/moe_route.hpp's route_moe_rows, which is its specification, with no host
// read, so that a call with new choices needs no synchronisation and replays in a CUDA graph.
// A stable counting sort: per chunk of 1024 (token, choice) pairs the count of each (source, expert)
// block, one CTA turning them into offsets, then each pair's rank among its block's pairs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "weft/kernels/overlap_gemm.hpp"
#include "weft/tile/wait_record.hpp"

namespace weft {

struct MoeRouteShape {
  int world = 1;
  int64_t m = 0;  // tokens per rank
  int topk = 1;
  int experts = 1;
  int64_t align = 1;  // each expert's first row of the expert-major scratch on a multiple of this
  int64_t pairs() const { return int64_t{world} * m * topk; }
  int64_t capacity() const { return pairs() + (align > 1 ? int64_t{experts} * (align - 1) : 0); }
};

// The (source, expert) blocks a shared-memory histogram holds: world * experts at most this.
constexpr int kMaxMoeRouteBlocks = 8192;

// Throws std::invalid_argument naming the limit where the route cannot take a shape (more blocks than
// kMaxMoeRouteBlocks, indices past int32): what a lowering asks before anything is enqueued.
void require_routable(const MoeRouteShape& shape);

// Device scratch the route needs beside its outputs (route_moe_rows_on_device's workspace).
size_t moe_route_workspace_bytes(const MoeRouteShape& shape);

// The tables the route writes, each int32 on the device; expert_first is always written, the others
// where not null. pairs = shape.pairs(), capacity = shape.capacity().
struct MoeRouteOutputs {
  int32_t* expert_first = nullptr;    // [experts + 1] (route_moe_rows' expert_first)
  int32_t* layout_row = nullptr;      // [pairs]: each (token, choice)'s op-layout row (route_moe_rows' layout_row)
  int32_t* expert_row = nullptr;      // [capacity]: each scratch row's op-layout row, -1 on padding (route_moe_rows' expert_row)
  int32_t* scratch_token = nullptr;   // [capacity]: each scratch row's token, 0 on padding (RouteStep, source token)
  int32_t* scratch_layout = nullptr;  // [capacity]: each scratch row's op-layout row, 0 on padding (RouteStep, source layout_row)
  int32_t* layout_scratch = nullptr;  // [pairs]: each op-layout row's scratch row (RouteStep::layout_scratch)
  int32_t* pair_scratch = nullptr;    // [pairs]: each (token, choice)'s scratch row (RouteStep::pair_scratch)
};

// choices: [world * m * topk] int32 on the device, every rank's choices stacked. Writes the tables as
// route_moe_rows does. A choice outside [0, experts) is recorded in `error` (kBadMoeChoice, where
// not null) and skipped: its layout row is -1 and the index tables read row 0 where it would have
// been, so that what reads them stays in bounds. Throws std::invalid_argument for a shape it cannot
// route (more blocks than kMaxMoeRouteBlocks, indices past int32), before anything is enqueued.
void route_moe_rows_on_device(const MoeRouteShape& shape, const int32_t* choices, const MoeRouteOutputs& out, WaitRecord* error, void* workspace,
                              cudaStream_t stream);

// The routed grouped GEMM's table (GemmStep::routed), built on the device from expert_first: entry
// (row tile i, column tile j) of the scratch's ceil(capacity / tile_m) x (n / tile_n) grid is expert
// e's tile where rows [i * tile_m, ...) lie in [expert_first[e], expert_first[e + 1]): its A rows
// there, B's rows e * n + j * tile_n.., stored at (i * tile_m, j * tile_n) of target 0 with the
// expert's rows of it; a row tile no expert's rows reach is a no-work entry (kNoWorkKTiles).
// `table` holds routed_moe_table_entries(...) entries; n a multiple of tile_n.
int64_t routed_moe_table_entries(int64_t capacity, int64_t n, int tile_m, int tile_n);
// Loads the route's and the table's kernels now (as preload_step_kernels, elementwise.hpp, and why).
void preload_moe_route_kernels();
void build_routed_moe_table(const int32_t* expert_first, int experts, int64_t capacity, int64_t n, int tile_m, int tile_n, OverlapGemmTile* table,
                            cudaStream_t stream);

}  // namespace weft
