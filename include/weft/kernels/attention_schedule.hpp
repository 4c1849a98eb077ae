// Which query tile of which head each CTA of the attention kernel computes, and in what order: plain
// C++ that the kernel (src/kernels/attention_kernel.cuh) and the host share, so that a CPU test can
// check the order covers every unit once and balances the CTAs' work.
//
// A unit is one query tile of one query head. Units are numbered in sections of heads, within a
// section the last query tiles first (under a causal mask they read the most keys) and heads fastest.
// Persistent CTAs take one unit per round in snake order: CTA b takes unit b of an even round and unit
// grid - 1 - b of an odd one, so that where a round's units get shorter along it (causal, longest
// first) every CTA's sum of lengths evens out.
//
// Sections: without a causal mask every unit reads all of its head's keys, and sections of one KV
// head (the query heads that share it) keep the K/V that the CTAs running at once read to one head's,
// which stays in L2 (FlashAttention-3's head sections). Under a causal mask units differ in length,
// and one section of every head is what the snake balances: sections would repeat the long-to-short
// run in each, which a static order cannot balance.
#pragma once

#include <cstdint>

#include "weft/ir/tile_map.hpp"  // WEFT_HOST_DEVICE

namespace weft::attention_detail {

struct UnitCoord {
  int q_tile;
  int head;
};

struct AttentionSchedule {
  int q_tiles = 0;        // query tiles per head
  int heads = 0;          // query heads
  int section_heads = 0;  // query heads per section (a multiple of heads / kv_heads, or all heads)

  static AttentionSchedule of(int64_t q_rows, int tile_q, int heads, int kv_heads, bool causal) {
    return AttentionSchedule{static_cast<int>((q_rows + tile_q - 1) / tile_q), heads, causal ? heads : heads / kv_heads};
  }

  WEFT_HOST_DEVICE int unit_count() const { return q_tiles * heads; }

  // CTA `cta`'s unit of round `round` among `grid` CTAs; past unit_count() in the last round only.
  WEFT_HOST_DEVICE static int unit_index(int cta, int grid, int round) { return round * grid + ((round & 1) ? grid - 1 - cta : cta); }

  // Unit `index` (< unit_count()): every section but the last is full.
  WEFT_HOST_DEVICE UnitCoord unit(int index) const {
    const int per_section = q_tiles * section_heads;
    const int section = index / per_section;
    const int first_head = section * section_heads;
    const int in_section_heads = heads - first_head < section_heads ? heads - first_head : section_heads;
    const int in_section = index - section * per_section;
    return UnitCoord{q_tiles - 1 - in_section / in_section_heads, first_head + in_section % in_section_heads};
  }
};

}  // namespace weft::attention_detail
