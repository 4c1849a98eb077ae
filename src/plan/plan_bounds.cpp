#include "weft/plan/plan_bounds.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

namespace weft {

namespace {

void require_attention_fits(const Problem& p) {
  if (p.m < 1 || p.m > kMaxDimension)
    throw std::invalid_argument("m=" + std::to_string(p.m) + " (tokens per rank) must be between 1 and " + std::to_string(kMaxDimension));
  for (const auto& [name, value, most] : {std::tuple{"heads", p.heads, kMaxAttentionHeads}, std::tuple{"kv_heads", p.kv_heads, kMaxAttentionHeads},
                                          std::tuple{"head_dim", p.head_dim, kMaxHeadDim}, std::tuple{"batch", p.batch, kMaxDimension}})
    if (value < 1 || value > most)
      throw std::invalid_argument(std::string(name) + "=" + std::to_string(value) + " must be between 1 and " + std::to_string(most));
  if (query_cols(p) > kMaxDimension)
    throw std::invalid_argument("batch x heads x head_dim is " + std::to_string(query_cols(p)) + " columns of Q, more than the " +
                                std::to_string(kMaxDimension) + " weft lays out on the CPU: use a smaller batch");
}

}  // namespace

void require_problem_fits(const Problem& p) {
  if (p.world_size < 1 || p.world_size > kMaxPlanWorld)
    throw std::invalid_argument("world size " + std::to_string(p.world_size) + ": plans are laid out on the CPU for 1 to " +
                                std::to_string(kMaxPlanWorld) + " ranks");
  if (is_attention(p.op)) {
    require_attention_fits(p);
    return;
  }
  for (const auto& [name, value] : {std::pair{"m", p.m}, std::pair{"n", p.n}, std::pair{"k", p.k}})
    if (value < 1 || value > kMaxDimension)
      throw std::invalid_argument(std::string(name) + "=" + std::to_string(value) + " must be between 1 and " + std::to_string(kMaxDimension));
  const int64_t routed = static_cast<int64_t>(p.world_size) * p.m * std::max(1, p.topk);
  if ((routes_rows(p.op) || is_moe(p.op)) && routed > kMaxRoutedRows)
    throw std::invalid_argument("world x m" + std::string(is_moe(p.op) ? " x topk" : "") + " is " + std::to_string(routed) +
                                " routed rows, more than the " + std::to_string(kMaxRoutedRows) + " weft lays out on the CPU");
}

void require_plan_fits(const Problem& p, const PlanOptions& o) {
  if (is_attention(p.op)) {
    // Every rank's KV tiles over all the keys: tile_n rows each, or tilelink's communication tiles
    // where smaller (each of which is a signal too).
    const int64_t rows = o.tilelink.comm_tile_rows > 0 ? std::min<int64_t>(o.tile_n, o.tilelink.comm_tile_rows) : o.tile_n;
    const double tiles = static_cast<double>(p.world_size) * p.world_size * std::ceil(static_cast<double>(p.m) / static_cast<double>(rows));
    if (tiles > static_cast<double>(kMaxPlanTileEntries))
      throw std::invalid_argument("this plan would hold about " + std::to_string(static_cast<int64_t>(tiles)) + " KV tiles over its " +
                                  std::to_string(p.world_size) + " ranks, more than the " + std::to_string(kMaxPlanTileEntries) +
                                  " weft lays out on the CPU: use a larger tile (its N side is the KV tile) or fewer tokens");
    return;
  }
  // The GEMM tile entries of all ranks' plans (each rank's GEMMs cover at most its A rows, or the
  // gathered rows, by N), with the smallest tile the options allow.
  const int64_t rows = p.op == OpKind::ag_gemm ? p.m * p.world_size : std::max(a_rows(p), output_rows(p, 0));
  const double tiles = static_cast<double>(p.world_size) * std::ceil(static_cast<double>(rows) / o.tile_m) *
                       std::ceil(static_cast<double>(p.n) / o.tile_n);
  if (tiles > static_cast<double>(kMaxPlanTileEntries))
    throw std::invalid_argument("this plan would hold about " + std::to_string(static_cast<int64_t>(tiles)) + " GEMM tile entries over its " +
                                std::to_string(p.world_size) + " ranks, more than the " + std::to_string(kMaxPlanTileEntries) +
                                " weft lays out on the CPU: use a larger tile or smaller m and n");
}

}  // namespace weft
