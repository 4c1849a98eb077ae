// The companion kernel of TileLink-style plans: a run of SM-driven copy and reduce steps of one
// stream, executed by one resident launch on a chosen number of CTAs. Each item (a plan step) is cut
// into row pieces that CTAs take in order from a ticket counter; the pieces of an item start once
// the item's waits are met (bounded device-side spins, acquire at system scope) and once the
// earlier items it must follow are complete; the CTA that completes an item's last piece makes its
// notifies (release at system scope). So the steps keep their plan semantics while waits and
// notifies cost no launch and no stream operation, and the SMs the kernel holds are the
// communication's, beside a GEMM limited to the rest (GemmStep::sm_limit).
//
// Which earlier items an item follows (order_tile_program_items): an item that notifies, or a join,
// follows every earlier one (a notify says the steps before it are done: the stream order of the
// steps it stands for). Any other item follows the earlier joins (a join gates every step after
// it), every earlier item that waits where it waits for nothing itself (it may rely on their
// waits), and the earlier items whose regions overlap its own where one of the two writes (the
// same buffer slot, overlapping element ranges; distinct buffers of a plan never overlap); so
// independent items that wait for their own data run side by side instead of each waiting for the
// last piece of the one before (tilelink's gemm_rs: the channels of one source rank, each a chain
// over the sources, each reduction waiting for the partial sums it reads).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "weft/kernels/elementwise.hpp"
#include "weft/tile/wait_record.hpp"

namespace weft {

constexpr int kTileProgramMaxWaits = 4;
constexpr int kTileProgramMaxNotifies = 4;
constexpr int kTileProgramMaxBases = 32;
constexpr int kTileProgramMaxAfter = 4;
// WaitRecord::signal when an item gave up waiting for an earlier item to complete.
constexpr int32_t kTileProgramOrderSignal = -4;

// A region as an offset from one of the launch's base addresses (so that a caller's buffer may move
// between calls: only the bases change).
struct TileProgramRegion {
  int32_t base = 0;
  int32_t pad = 0;
  int64_t offset = 0;  // elements
  int64_t rows = 0, cols = 0, stride = 0;
};

struct TileProgramItem {
  enum Kind : int32_t { copy = 0, reduce = 1, sync = 2 };  // sync: waits and notifies only (a plan's join)
  int32_t kind = copy;
  int32_t source_count = 1;
  int32_t accumulate = 0;
  int32_t wait_count = 0;
  int32_t notify_count = 0;
  int32_t piece_rows = 1;  // rows per piece; pieces = ceil(dst.rows / piece_rows)
  int32_t step = 0;        // the plan step it stands for: what a timed-out wait reports (WaitRecord::where)
  int32_t after_all = 1;   // 1: follows every earlier item; 0: only after[0..after_count)
  int32_t after_count = 0;
  int32_t after[kTileProgramMaxAfter] = {};
  int32_t wait_signal[kTileProgramMaxWaits] = {};
  uint64_t wait_value[kTileProgramMaxWaits] = {};
  uint64_t* notify[kTileProgramMaxNotifies] = {};  // a counter on this rank or a peer
  uint64_t notify_increment[kTileProgramMaxNotifies] = {};
  int64_t first_unit = 0;  // the item's first piece in the launch's piece order
  int64_t pieces = 1;      // at least 1, so that an empty item still completes and notifies
  TileProgramRegion dst;
  TileProgramRegion srcs[kMaxReduceSources];
};

struct TileProgramLaunch {
  const TileProgramItem* items = nullptr;  // device
  int item_count = 0;
  int64_t unit_count = 0;                  // pieces over all items
  void* bases[kTileProgramMaxBases] = {};
  uint64_t* counters = nullptr;            // device, 1 + item_count: the ticket, then pieces done per item
  const uint64_t* wait_signals = nullptr;  // this rank's counters
  WaitRecord* error = nullptr;
  uint64_t wait_timeout_ns = 0;
  int ctas = 16;
};

// Fills after_all, after_count and after (see above).
void order_tile_program_items(std::vector<TileProgramItem>& items);
// Fills first_unit, piece_rows and pieces (pieces of at most `piece_bytes`, at least one per CTA of
// `ctas` where the item is large enough); returns the total piece count.
int64_t plan_tile_program_pieces(std::vector<TileProgramItem>& items, int ctas, int64_t piece_bytes = 128 * 1024);
// Zeroes the counters and launches, both on `stream` (graph-capturable).
void launch_tile_program(const TileProgramLaunch& launch, cudaStream_t stream);
void preload_tile_program_kernel();

}  // namespace weft
