// How large a plan weft lays out on the CPU: the tool's plan, check and simulate, and the Python
// module's describe_plan and choose_strategy hold problems to these bounds, so that a mistyped size
// is an error naming the bound instead of gigabytes of plan or an allocation failure.
#pragma once

#include <cstdint>

#include "weft/ir/problem.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

// World sizes (a plan lays out every rank) and each of m, n, k.
constexpr int64_t kMaxPlanWorld = 64;
constexpr int64_t kMaxDimension = int64_t{1} << 24;
// GEMM tile entries of a plan over all ranks (each is ~100 bytes; the reference run is far smaller).
constexpr int64_t kMaxPlanTileEntries = int64_t{1} << 21;
// ag_attention: heads (query and key/value) and the head dimension, each; batch x heads x head_dim
// (Q's columns) is a dimension like the others.
constexpr int64_t kMaxAttentionHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
// Routed rows (world x m x topk) a CPU plan draws a routing for: 4M, far beyond a real batch (8
// ranks x 16k tokens x top-8 is 1M), and drawn in well under a second, sanitizers included.
constexpr int64_t kMaxRoutedRows = int64_t{1} << 22;

// Throws std::invalid_argument naming the bound when the world size, m, n, k, or (for routed and MoE
// ops) the routed rows exceed it (ag_attention: m, heads, kv_heads, head_dim and Q's columns instead
// of n and k); call before drawing a routing.
void require_problem_fits(const Problem& problem);
// Throws std::invalid_argument when the plans of `problem` would hold more than kMaxPlanTileEntries
// GEMM tile entries (ag_attention: KV tiles) over all ranks with the options' tile.
void require_plan_fits(const Problem& problem, const PlanOptions& options);

}  // namespace weft
