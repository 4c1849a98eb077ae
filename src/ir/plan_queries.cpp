// Questions about a whole plan that executors ask once per plan.
#include <algorithm>

#include "weft/ir/plan.hpp"

namespace weft {

bool reaches_across_ranks(const Plan& plan) {
  for (const RankPlan& rp : plan.ranks) {
    auto foreign = [&](const Region& r) { return r.rank != rp.rank; };
    for (const Step& step : rp.steps) {
      for (const Notify& n : step.notifies)
        if (n.signal.rank != rp.rank) return true;
      const bool reaches = std::visit(
          [&](const auto& b) {
            using T = std::decay_t<decltype(b)>;
            if constexpr (std::is_same_v<T, GemmStep>) {
              for (const GemmTile& t : b.tiles)
                if (foreign(t.store) || (t.notify && t.notify->signal.rank != rp.rank) ||
                    std::any_of(t.addends.begin(), t.addends.end(), foreign) || (t.a_rows && foreign(*t.a_rows)))
                  return true;
              return foreign(b.a) || foreign(b.b);
            } else if constexpr (std::is_same_v<T, CopyStep> || std::is_same_v<T, PermuteRowsStep> || std::is_same_v<T, MoveBoxesStep>) {
              return foreign(b.src) || foreign(b.dst);
            } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
              return foreign(b.src) || foreign(b.weights) || foreign(b.dst);
            } else if constexpr (std::is_same_v<T, ReduceStep>) {
              for (const Region& r : b.srcs)
                if (foreign(r)) return true;
              return foreign(b.dst);
            } else if constexpr (std::is_same_v<T, AttentionStep>) {
              return foreign(b.q) || foreign(b.k) || foreign(b.v) || foreign(b.o) || foreign(b.lse);
            } else {
              return false;  // collectives and joins touch only their own rank's memory
            }
          },
          step.body);
      if (reaches) return true;
    }
  }
  return false;
}

bool is_plain_tile_table(const GemmStep& gemm) {
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
