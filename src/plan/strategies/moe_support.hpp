// The pieces every MoE plan (ag_moe, moe_rs) is built from, one source rank's block at a time:
// its tokens gathered into the expert-grouped row layout (ir/problem.hpp's MoeRows), one library
// GEMM per expert of the block (the grouped GEMM: each expert's rows against its rows of B), and
// the top-k weighted reduction of the block's rows back to its tokens.
#pragma once

#include <vector>

#include "builder_support.hpp"

namespace weft::detail {

// Rows of source s's block (in the expert-grouped layout) from source s's M tokens in `tokens`.
PermuteRowsStep gather_block(const Problem& p, const MoeRows& rows, int s, const Region& tokens, const Region& block);

// One GEMM per expert that source s's tokens picked: rows of `x` (the whole expert-grouped input)
// of (s, e) against rows [e * N, (e + 1) * N) of `w` into the same rows of `out`; in expert order,
// on `stream`. Returns the indices of the steps added (none for an expert nobody picked).
std::vector<size_t> add_expert_gemms(RankPlanBuilder& b, const Problem& p, const MoeRows& rows, int s, BufferId x, BufferId w, BufferId out,
                                     const PlanOptions& options, int stream);

// Token i of source s (row i of `tokens_out`) = sum_j weights[i, j] * row (s, i, j) of `block`,
// source s's rows in the expert-grouped layout.
CombineRowsStep combine_block(const Problem& p, const MoeRows& rows, int s, const Region& block, const Region& weights, const Region& tokens_out);

}  // namespace weft::detail
