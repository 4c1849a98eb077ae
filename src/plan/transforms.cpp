#include "weft/plan/transforms.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "strategies/builder_support.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

Plan steps_of_kind(Plan plan, StepKind kind) {
  plan.strategy += kind == StepKind::gemm ? "/gemm-only" : "/communication-only";
  for (RankPlan& rp : plan.ranks) {
    // An attention step is the computation of an attention plan, as a GEMM is of the others.
    std::erase_if(rp.steps, [&](const Step& s) {
      return kind == StepKind::gemm ? !std::holds_alternative<GemmStep>(s.body) && !std::holds_alternative<AttentionStep>(s.body)
                                    : !std::holds_alternative<CollectiveStep>(s.body);
    });
    for (Step& s : rp.steps) {
      s.waits.clear();
      if (auto* gemm = std::get_if<GemmStep>(&s.body))
        for (GemmTile& t : gemm->tiles) t.wait.reset();
      if (auto* attention = std::get_if<AttentionStep>(&s.body))
        for (KvTile& t : attention->kv_tiles) t.wait.reset();
    }
  }
  return plan;
}

namespace {

// The output region a plain tile table covers: the store of its tile (0, 0), grown to the GEMM.
Region output_of(const GemmStep& gemm) {
  const GemmTile& first = gemm.tiles.front();
  Region c = first.store;
  c.box = Rect{first.store.box.row - first.tile.row, first.store.box.col - first.tile.col, gemm.a.box.rows, gemm.b.box.rows};
  return c;
}

Region rows_of(Region r, int64_t first, int64_t count) {
  r.box.row += first;
  r.box.rows = count;
  return r;
}

Region cols_of(Region r, int64_t first, int64_t count) {
  r.box.col += first;
  r.box.cols = count;
  return r;
}

}  // namespace

Plan split_gemms(const Plan& plan, GemmSplitAxis axis, int parts) {
  if (parts < 1) throw std::invalid_argument("split_gemms: parts must be >= 1, got " + std::to_string(parts));
  Plan result = plan;
  result.strategy += axis == GemmSplitAxis::rows ? "/rows" : "/k";
  result.strategy += std::to_string(parts);
  for (RankPlan& rp : result.ranks) {
    std::vector<Step> steps;
    for (const Step& step : rp.steps) {
      const auto* gemm = std::get_if<GemmStep>(&step.body);
      if (!gemm || gemm->tiles.empty() || parts == 1) {
        steps.push_back(step);
        continue;
      }
      if (!is_plain_tile_table(*gemm) || gemm->accumulate)
        throw std::invalid_argument("split_gemms: step '" + step.label + "' has waits, notifies, remapped stores or accumulates");
      const Region c = output_of(*gemm);
      PlanOptions options;
      options.tile_m = gemm->tile_m;
      options.tile_n = gemm->tile_n;
      // Cut points: rows anywhere; K on multiples of 64 (at most as many pieces as 64-deep slices).
      const int64_t extent = axis == GemmSplitAxis::rows ? gemm->a.box.rows : gemm->a.box.cols;
      const int64_t unit = axis == GemmSplitAxis::rows ? 1 : 64;
      const int64_t units = (extent + unit - 1) / unit;
      const int pieces = static_cast<int>(std::min<int64_t>(parts, units));
      for (int p = 0; p < pieces; ++p) {
        const int64_t begin = std::min(extent, units * p / pieces * unit);
        const int64_t end = p + 1 == pieces ? extent : std::min(extent, units * (p + 1) / pieces * unit);
        GemmStep piece = axis == GemmSplitAxis::rows
                             ? detail::gemm_into(rows_of(gemm->a, begin, end - begin), gemm->b, rows_of(c, begin, end - begin), options)
                             : detail::gemm_into(cols_of(gemm->a, begin, end - begin), cols_of(gemm->b, begin, end - begin), c, options);
        piece.accumulate = axis == GemmSplitAxis::k && p > 0;
        piece.exchanged = gemm->exchanged;
        piece.cluster_m = gemm->cluster_m;  // the lowering refuses pieces whose tiles no longer pair
        piece.cluster_n = gemm->cluster_n;
        Step s = step;
        s.label = step.label + (axis == GemmSplitAxis::rows ? " rows " : " k ") + std::to_string(p + 1) + "/" + std::to_string(pieces);
        s.body = std::move(piece);
        if (p > 0) s.waits.clear();
        if (p + 1 < pieces) s.notifies.clear();
        steps.push_back(std::move(s));
      }
    }
    rp.steps = std::move(steps);
  }
  return result;
}

void order_tiles_in_clusters(GemmStep& gemm, int cluster_m, int cluster_n) {
  const std::string what = "order_tiles_in_clusters(" + std::to_string(cluster_m) + "x" + std::to_string(cluster_n) + "): ";
  if (cluster_m < 1 || cluster_n < 1) throw std::invalid_argument(what + "cluster sides must be >= 1");
  // Tile (i, j) of the grid lies at rows i * tile_m.., columns j * tile_n.. of the step's output.
  struct Place {
    int64_t i, j;
  };
  std::vector<Place> places;
  places.reserve(gemm.tiles.size());
  int64_t rows = 0, columns = 0;
  for (const GemmTile& t : gemm.tiles) {
    if (t.tile.row % gemm.tile_m != 0 || t.tile.col % gemm.tile_n != 0)
      throw std::invalid_argument(what + "tile at (" + std::to_string(t.tile.row) + ", " + std::to_string(t.tile.col) + ") is off the " +
                                  std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) + " grid");
    places.push_back({t.tile.row / gemm.tile_m, t.tile.col / gemm.tile_n});
    rows = std::max(rows, places.back().i + 1);
    columns = std::max(columns, places.back().j + 1);
  }
  if (rows % cluster_m != 0 || columns % cluster_n != 0)
    throw std::invalid_argument(what + std::to_string(rows) + " tile rows by " + std::to_string(columns) + " tile columns are not whole blocks of " +
                                std::to_string(cluster_m) + "x" + std::to_string(cluster_n));
  // Each block's tiles by their place in it; blocks in the order their first tile comes.
  const int size = cluster_m * cluster_n;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> members;  // block -> tile index per place (-1: none)
  std::vector<std::pair<int64_t, int64_t>> block_order;
  for (size_t t = 0; t < places.size(); ++t) {
    const std::pair<int64_t, int64_t> block{places[t].i / cluster_m, places[t].j / cluster_n};
    auto [it, fresh] = members.try_emplace(block, std::vector<int64_t>(static_cast<size_t>(size), -1));
    if (fresh) block_order.push_back(block);
    // The kernel's place in its cluster: (row, column) of its block at row + column * (its cluster's
    // rows); for the exchanged product the kernel's rows are C's tile columns.
    const size_t at = gemm.exchanged ? static_cast<size_t>(places[t].j % cluster_n + places[t].i % cluster_m * cluster_n)
                                     : static_cast<size_t>(places[t].i % cluster_m + places[t].j % cluster_n * cluster_m);
    if (it->second[at] >= 0)
      throw std::invalid_argument(what + "two tiles at (" + std::to_string(places[t].i) + ", " + std::to_string(places[t].j) + ") of the grid");
    it->second[at] = static_cast<int64_t>(t);
  }
  std::vector<GemmTile> ordered;
  ordered.reserve(gemm.tiles.size());
  for (const auto& block : block_order)
    for (int64_t t : members.at(block)) {
      if (t < 0)
        throw std::invalid_argument(what + "the block at tile row " + std::to_string(block.first * cluster_m) + ", tile column " +
                                    std::to_string(block.second * cluster_n) + " is not whole (a cluster needs every tile of its block)");
      ordered.push_back(gemm.tiles[static_cast<size_t>(t)]);
    }
  gemm.tiles = std::move(ordered);
  gemm.cluster_m = cluster_m;
  gemm.cluster_n = cluster_n;
}

}  // namespace weft
