#include "weft/plan/analysis.hpp"

namespace weft {

std::map<std::pair<int, int>, CounterRaises> counter_raises(const Plan& plan) {
  std::map<std::pair<int, int>, CounterRaises> raises;
  auto count = [&](const Notify& n, int rank, int writer) {
    CounterRaises& c = raises[{n.signal.rank, n.signal.id}];
    c.per_call += n.increment;
    c.writers.insert({rank, writer});
  };
  for (const RankPlan& rp : plan.ranks)
    for (const Step& s : rp.steps) {
      for (const Notify& n : s.notifies) count(n, rp.rank, s.stream);
      if (const auto* g = std::get_if<GemmStep>(&s.body))
        for (const GemmTile& t : g->tiles)
          if (t.notify) count(*t.notify, rp.rank, kTileWriter);
    }
  return raises;
}

std::vector<std::vector<uint64_t>> single_writer_values(const Plan& plan, int rank) {
  const auto raises = counter_raises(plan);
  const RankPlan& rp = plan.ranks.at(static_cast<size_t>(rank));
  std::map<std::pair<int, int>, uint64_t> so_far;
  std::vector<std::vector<uint64_t>> values;
  values.reserve(rp.steps.size());
  for (const Step& s : rp.steps) {
    std::vector<uint64_t>& mine = values.emplace_back();
    for (const Notify& n : s.notifies) {
      const auto key = std::make_pair(n.signal.rank, n.signal.id);
      const std::set<std::pair<int, int>>& writers = raises.at(key).writers;
      const bool alone = writers.size() == 1 && *writers.begin() == std::make_pair(rank, s.stream);
      mine.push_back(alone ? (so_far[key] += n.increment) : 0);
    }
  }
  return values;
}

}  // namespace weft
