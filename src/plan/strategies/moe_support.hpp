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

// The rows of every source in expert-major order (expert, then source, then as within a block):
// position[row] is where row `row` of the op's layout (source-major) lies there, and first[e] the
// first position of expert e (first[experts]: every row). A GEMM per expert over all sources' rows
// instead of one per (source, expert): W times fewer and W times taller GEMMs, where each is a few
// tiles (TileLink's MoE shapes: 128 GEMMs of 3-32 tiles at world 4, the GPU a quarter full).
struct ExpertMajorRows {
  std::vector<int64_t> position;
  std::vector<int64_t> first;
  int64_t expert_rows(int e) const { return first[static_cast<size_t>(e) + 1] - first[static_cast<size_t>(e)]; }
};
ExpertMajorRows expert_major(const Problem& p, const MoeRows& rows);

// One GEMM per expert with rows: rows [first[e], first[e + 1]) of `x` against rows [e * N, (e + 1) *
// N) of `w` into the same rows of `out`, in expert order, on `stream`.
void add_expert_major_gemms(RankPlanBuilder& b, const Problem& p, const ExpertMajorRows& order, BufferId x, BufferId w, BufferId out,
                            const PlanOptions& options, int stream);

// Token i of source s (row i of `tokens_out`) = sum_j weights[i, j] * row (s, i, j) of `block`,
// source s's rows in the expert-grouped layout.
CombineRowsStep combine_block(const Problem& p, const MoeRows& rows, int s, const Region& block, const Region& weights, const Region& tokens_out);

}  // namespace weft::detail
