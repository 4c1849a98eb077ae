#include "weft/plan/moe_route.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace weft {

int64_t moe_route_capacity(int world, int64_t m, int topk, int experts, int64_t align) {
  return int64_t{world} * m * topk + (align > 1 ? int64_t{experts} * (align - 1) : 0);
}

MoeRouteTables route_moe_rows(std::span<const int32_t> choices, int world, int64_t m, int topk, int experts, int64_t align) {
  if (world < 1 || m < 0 || topk < 1 || experts < 1 || align < 1)
    throw std::invalid_argument("route_moe_rows: world " + std::to_string(world) + ", m " + std::to_string(m) + ", topk " + std::to_string(topk) +
                                ", experts " + std::to_string(experts) + ", align " + std::to_string(align) +
                                "; every one must be >= 1 (m >= 0)");
  const int64_t pairs = int64_t{world} * m * topk;
  if (static_cast<int64_t>(choices.size()) != pairs)
    throw std::invalid_argument("route_moe_rows: " + std::to_string(choices.size()) + " choices for world " + std::to_string(world) + " x m " +
                                std::to_string(m) + " x topk " + std::to_string(topk) + " = " + std::to_string(pairs));
  const int64_t capacity = moe_route_capacity(world, m, topk, experts, align);
  if (capacity > INT32_MAX) throw std::invalid_argument("route_moe_rows: " + std::to_string(capacity) + " rows do not fit int32 indices");
  // Counts per (source, expert); the op layout's blocks are s-major, e-minor.
  std::vector<int64_t> count(static_cast<size_t>(world) * experts, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = choices[static_cast<size_t>(p)];
    if (e < 0 || e >= experts)
      throw std::invalid_argument("route_moe_rows: choice " + std::to_string(p) + " (rank " + std::to_string(p / (m * topk)) + ", token " +
                                  std::to_string(p / topk % m) + ", choice " + std::to_string(p % topk) + ") is expert " + std::to_string(e) +
                                  ", not in [0, " + std::to_string(experts) + ")");
    ++count[static_cast<size_t>(p / (m * topk) * experts + e)];
  }
  std::vector<int64_t> block_first(count.size(), 0);
  for (size_t b = 1; b < count.size(); ++b) block_first[b] = block_first[b - 1] + count[b - 1];
  // The expert-major scratch: expert e's rows, every source's in turn, from an aligned first row.
  MoeRouteTables t;
  t.expert_first.assign(static_cast<size_t>(experts) + 1, 0);
  std::vector<int64_t> expert_source_first(count.size(), 0);  // [s * experts + e]: source s's first row of expert e there
  int64_t next = 0;
  for (int e = 0; e < experts; ++e) {
    int64_t rows = 0;
    for (int s = 0; s < world; ++s) rows += count[static_cast<size_t>(s) * experts + e];
    if (rows > 0) next = (next + align - 1) / align * align;  // no padding for an expert nobody picked
    t.expert_first[static_cast<size_t>(e)] = static_cast<int32_t>(next);
    for (int s = 0; s < world; ++s) {
      expert_source_first[static_cast<size_t>(s) * experts + e] = next;
      next += count[static_cast<size_t>(s) * experts + e];
    }
  }
  t.expert_first[static_cast<size_t>(experts)] = static_cast<int32_t>(next);
  // Each (token, choice) in its block, in token-then-choice order (the order pairs are listed in).
  t.layout_row.assign(static_cast<size_t>(pairs), 0);
  t.expert_row.assign(static_cast<size_t>(capacity), -1);
  std::vector<int64_t> taken(count.size(), 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const size_t b = static_cast<size_t>(p / (m * topk) * experts + choices[static_cast<size_t>(p)]);
    const int64_t q = taken[b]++;
    const int64_t row = block_first[b] + q;
    t.layout_row[static_cast<size_t>(p)] = static_cast<int32_t>(row);
    t.expert_row[static_cast<size_t>(expert_source_first[b] + q)] = static_cast<int32_t>(row);
  }
  return t;
}

std::vector<RoutedRowTile> routed_row_tiles(const MoeRouteTables& t, int world, int64_t m, int topk, int tile_m, int rank) {
  if (world < 1 || m < 0 || topk < 1 || tile_m < 1 || rank < 0 || rank >= world || t.expert_first.size() < 2)
    throw std::invalid_argument("routed_row_tiles: world " + std::to_string(world) + ", m " + std::to_string(m) + ", topk " + std::to_string(topk) +
                                ", tile_m " + std::to_string(tile_m) + ", rank " + std::to_string(rank) + ", " +
                                std::to_string(t.expert_first.size()) + " expert_first entries: not a route of a world with this rank");
  const int64_t per_source = m * topk;  // the op layout's rows of each source
  std::vector<std::vector<RoutedRowTile>> by_stage(static_cast<size_t>(world));
  for (size_t e = 0; e + 1 < t.expert_first.size(); ++e) {
    // The expert's rows run from its first row up to the padding before the next expert's.
    const int64_t first = t.expert_first[e];
    int64_t end = t.expert_first[e + 1];
    while (end > first && t.expert_row[static_cast<size_t>(end - 1)] < 0) --end;
    if (first % tile_m != 0 && end > first)
      throw std::invalid_argument("routed_row_tiles: expert " + std::to_string(e) + " starts at scratch row " + std::to_string(first) +
                                  ", off the grid of " + std::to_string(tile_m) + "-row tiles (route with align a multiple of tile_m)");
    for (int64_t row = first; row < end; row += tile_m) {
      RoutedRowTile tile;
      tile.expert = static_cast<int32_t>(e);
      tile.row = static_cast<int32_t>(row);
      tile.rows = static_cast<int32_t>(std::min<int64_t>(tile_m, end - row));
      // Source order within the expert: the first and last rows' sources bound the tile's.
      tile.source_first = static_cast<int32_t>(t.expert_row[static_cast<size_t>(row)] / per_source);
      tile.source_last = static_cast<int32_t>(t.expert_row[static_cast<size_t>(row + tile.rows - 1)] / per_source);
      // Its stage from the sources it has rows of (a source of the range may have none here).
      for (int64_t r = row; r < row + tile.rows; ++r)
        tile.stage = std::max(tile.stage, static_cast<int32_t>((t.expert_row[static_cast<size_t>(r)] / per_source - rank + world) % world));
      by_stage[static_cast<size_t>(tile.stage)].push_back(tile);
    }
  }
  std::vector<RoutedRowTile> tiles;
  for (auto& stage : by_stage) tiles.insert(tiles.end(), stage.begin(), stage.end());
  return tiles;
}

}  // namespace weft
