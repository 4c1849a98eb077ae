// Internal: ag_attention's plans, one per strategy that builds them (attention.cpp says what each
// does). plan_sequential, plan_decomposed and plan_tilelink call these for ag_attention, one rank at
// a time, as they call their GEMM builders for the other ops.
#pragma once

#include "builder_support.hpp"

namespace weft::detail {

// sequential: NCCL all_gather of K, then of V, then one attention step over every rank's keys.
void build_attention_gathered(const Problem& problem, const PlanOptions& options, RankPlanBuilder& builder);
// decomposed (RingAttention): attention over the own keys, then over each peer's, pulled by the
// copy engine in ring order, each merged into the result by its log-sum-exp.
void build_attention_ring(const Problem& problem, const PlanOptions& options, RankPlanBuilder& builder);
// tilelink (TileLink §5.3): one attention step whose KV tiles wait for the copy-engine pulls of
// their rows, the own keys first.
void build_attention_tile_waits(const Problem& problem, const PlanOptions& options, RankPlanBuilder& builder);

}  // namespace weft::detail
