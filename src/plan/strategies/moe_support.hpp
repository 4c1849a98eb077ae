// The pieces every MoE plan (ag_moe, moe_rs) is built from, one source rank's block at a time:
// its tokens gathered into the expert-grouped row layout (ir/problem.hpp's MoeRows), one library
// GEMM per expert of the block (the grouped GEMM: each expert's rows against its rows of B), and
// the top-k weighted reduction of the block's rows back to its tokens.
#pragma once

#include <functional>
#include <string>
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
// With `align` > 1 each picked expert's rows start on a multiple of it (the grouped GEMM's tile grid):
// the rows between experts are padding nobody stores or reads back, and total() exceeds the op's rows
// by at most (experts) x (align - 1): padded_capacity(), what buffers of these rows are sized to, so
// that their size does not depend on the routing (weft::Op reserves its workspace once).
struct ExpertMajorRows {
  std::vector<int64_t> position;
  std::vector<int64_t> first;
  std::vector<int64_t> count;  // rows of expert e
  int64_t expert_rows(int e) const { return count[static_cast<size_t>(e)]; }
  int64_t total() const { return first.back(); }
  // Whether position[row] == row for every row: the op's layout is expert-major already.
  bool identity() const;
};
ExpertMajorRows expert_major(const Problem& p, const MoeRows& rows, int64_t align = 1);
inline int64_t padded_capacity(const Problem& p, const MoeRows& rows, int64_t align) {
  return rows.rows() + (align > 1 ? static_cast<int64_t>(p.experts) * (align - 1) : 0);
}

// A source's region: its M * topk rows with every expert's padding, rounded up to `align`; it does
// not depend on the routing (buffers sized by it stay the size weft::Op reserved).
inline int64_t source_capacity(const Problem& p, int64_t align) {
  const int64_t rows = p.m * p.topk + (align > 1 ? static_cast<int64_t>(p.experts) * (align - 1) : 0);
  return (rows + align - 1) / align * align;
}

// The tile width of sequential's grouped MoE GEMM (PlanOptions::moe_grouped_gemm): the widest
// overlap GEMM tile of 128 rows whose width divides N (each expert's rows of B then start on the
// tile grid); 0 where the grouped GEMM does not apply (off, FP8 operands, no such width).
int grouped_gemm_tile_n(const Problem& p, const PlanOptions& options);
constexpr int kGroupedGemmTileM = 128;

// The experts' GEMMs: with tile_n = grouped_gemm_tile_n(...) > 0 (`order` aligned to
// kGroupedGemmTileM), one GEMM of `x`'s rows against all of `w` whose tiles are each expert's rows
// against its own rows of B, stored into the same rows of `out`; otherwise one GEMM per expert with
// rows: rows [first[e], first[e] + count[e]) of `x` against rows [e * N, (e + 1) * N) of `w` into
// the same rows of `out`, in expert order. On `stream`.
// `stores_at` (one row per expert, optional): where expert e's rows go in `out`, when not at the rows
// they have in `x` (a per-source plan stores straight into the op's layout).
void add_expert_major_gemms(RankPlanBuilder& b, const Problem& p, const ExpertMajorRows& order, BufferId x, BufferId w, BufferId out,
                            const PlanOptions& options, int stream, int tile_n = 0, const std::vector<int64_t>* stores_at = nullptr);

// One source's experts in a per-source plan (decomposed): its rows gathered by expert from `src`
// (src_row(row): where the op's row `row` lies there) into the source's own region of `x` (rows
// [s, s + 1) x source_capacity(), each expert's rows on the grouped GEMM's tile grid where tile_n > 0;
// the padding between experts reads src's first row and is never stored), after `waits`; then the
// source's grouped GEMM (a GEMM per expert where tile_n is 0) storing each expert's rows into the
// source's rows of `out` in the op's layout. On `stream`.
void add_source_experts(RankPlanBuilder& b, const Problem& p, const MoeRows& rows, int s, const std::string& label, const Region& src,
                        const std::function<int64_t(int64_t)>& src_row, std::vector<Wait> waits, BufferId x, BufferId w, BufferId out,
                        const PlanOptions& options, int stream, int tile_n);

// Token i of source s (row i of `tokens_out`) = sum_j weights[i, j] * row (s, i, j) of `block`,
// source s's rows in the expert-grouped layout.
CombineRowsStep combine_block(const Problem& p, const MoeRows& rows, int s, const Region& block, const Region& weights, const Region& tokens_out);

// sequential's MoE with the choices given on the device (Problem::routing_on_device): on rank b's
// builder, after A (`a`) and B (`w`) are declared, every rank's choices gathered (NCCL, i32), the
// route, the rows gathered by expert (an index permute), one routed grouped GEMM and, for ag_moe, the
// rows put back in the op's layout; for moe_rs, the top-k reduction reading each (token, choice)'s
// row where the GEMM left it, then reduce_scatter. Throws std::invalid_argument where the grouped
// GEMM does not apply (grouped_gemm_tile_n is 0): the routed plan has no per-expert form.
void add_routed_moe(RankPlanBuilder& b, const Problem& p, BufferId a, BufferId w, const PlanOptions& options);

}  // namespace weft::detail
