// Questions about a whole plan that executors ask once per plan.
#include <algorithm>

#include "weft/ir/plan.hpp"

namespace weft {

std::vector<Region> regions_of(const StepBody& body) {
  return std::visit(
      [](const auto& b) -> std::vector<Region> {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, GemmStep>) {
          std::vector<Region> r{b.a, b.b};
          for (const GemmTile& t : b.tiles) {
            r.push_back(t.store);
            r.insert(r.end(), t.addends.begin(), t.addends.end());
            if (t.a_rows) r.push_back(*t.a_rows);
          }
          if (b.routed) {
            r.push_back(b.routed->expert_first);
            r.push_back(b.routed->out);
          }
          return r;
        } else if constexpr (std::is_same_v<T, PermuteRowsStep>) {
          std::vector<Region> r{b.src, b.dst};
          if (b.index) r.push_back(*b.index);
          return r;
        } else if constexpr (std::is_same_v<T, CopyStep> || std::is_same_v<T, MoveBoxesStep> || std::is_same_v<T, CollectiveStep>) {
          return {b.src, b.dst};
        } else if constexpr (std::is_same_v<T, ReduceStep>) {
          std::vector<Region> r = b.srcs;
          r.push_back(b.dst);
          return r;
        } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
          std::vector<Region> r{b.src, b.weights, b.dst};
          if (b.index) r.push_back(*b.index);
          return r;
        } else if constexpr (std::is_same_v<T, AttentionStep>) {
          return {b.q, b.k, b.v, b.o, b.lse};
        } else if constexpr (std::is_same_v<T, RouteStep>) {
          std::vector<Region> r{b.choices, b.scratch_source, b.expert_first};
          if (b.layout_scratch) r.push_back(*b.layout_scratch);
          if (b.pair_scratch) r.push_back(*b.pair_scratch);
          return r;
        } else {
          return {};
        }
      },
      body);
}

bool reaches_across_ranks(const Plan& plan) {
  for (const RankPlan& rp : plan.ranks) {
    auto foreign = [&](const Region& r) { return r.rank != rp.rank; };
    for (const Step& step : rp.steps) {
      for (const Notify& n : step.notifies)
        if (n.signal.rank != rp.rank) return true;
      if (const auto* gemm = std::get_if<GemmStep>(&step.body))
        for (const GemmTile& t : gemm->tiles)
          if (t.notify && t.notify->signal.rank != rp.rank) return true;
      // Collectives name only their own rank's memory (NCCL moves it).
      if (!std::holds_alternative<CollectiveStep>(step.body)) {
        const std::vector<Region> regions = regions_of(step.body);
        if (std::any_of(regions.begin(), regions.end(), foreign)) return true;
      }
    }
  }
  return false;
}

bool is_plain_tile_table(const GemmStep& gemm) {
  if (gemm.routed) return false;  // its tiles are made per call on the device
  if (gemm.tiles.empty()) return true;
  const GemmTile& first = gemm.tiles.front();
  const int64_t row0 = first.store.box.row - first.tile.row, col0 = first.store.box.col - first.tile.col;
  // A library GEMM writes the whole a x b product at (row0, col0): only a table that covers it (tiles
  // do not overlap: the structure check) and starts inside the target is one.
  if (row0 < 0 || col0 < 0) return false;
  int64_t covered = 0;
  for (const GemmTile& t : gemm.tiles) {
    if (t.wait || t.notify || !t.addends.empty() || t.a_rows || t.store.rank != first.store.rank || t.store.buffer != first.store.buffer ||
        t.store.box.row != row0 + t.tile.row || t.store.box.col != col0 + t.tile.col)
      return false;
    covered += t.tile.rows * t.tile.cols;
  }
  return covered == gemm.a.box.rows * gemm.b.box.rows;
}

}  // namespace weft
