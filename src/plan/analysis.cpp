#include "weft/plan/analysis.hpp"

#include <sstream>

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

std::set<int> peers_raising(const Plan& plan, int rank, int signal) {
  std::set<int> peers;
  const auto raises = counter_raises(plan);
  const auto it = raises.find({rank, signal});
  if (it == raises.end()) return peers;
  for (const auto& [writer_rank, stream] : it->second.writers)
    if (writer_rank != rank) peers.insert(writer_rank);
  return peers;
}

std::string describe_raisers(const Plan& plan, int rank, int signal) {
  // (rank, stream) -> the labels of its steps that raise the counter, in plan order.
  std::map<std::pair<int, int>, std::vector<std::string>> raisers;
  for (const RankPlan& rp : plan.ranks)
    for (const Step& s : rp.steps) {
      for (const Notify& n : s.notifies)
        if (n.signal.rank == rank && n.signal.id == signal) raisers[{rp.rank, s.stream}].push_back(s.label);
      if (const auto* g = std::get_if<GemmStep>(&s.body))
        for (const GemmTile& t : g->tiles)
          if (t.notify && t.notify->signal.rank == rank && t.notify->signal.id == signal) {
            auto& labels = raisers[{rp.rank, kTileWriter}];
            if (labels.empty() || labels.back() != s.label) labels.push_back(s.label);
          }
    }
  if (raisers.empty()) return "raised by nobody";
  std::ostringstream out;
  out << "raised by ";
  bool first = true;
  for (const bool peers : {true, false})
    for (const auto& [writer, labels] : raisers) {
      if ((writer.first != rank) != peers) continue;
      out << (first ? "" : "; ") << (writer.first == rank ? "this rank" : "rank " + std::to_string(writer.first)) << " ("
          << (writer.second == kTileWriter ? std::string("GEMM tiles of") : "stream " + std::to_string(writer.second) + ":");
      for (size_t i = 0; i < labels.size() && i < 3; ++i) out << (i ? ", '" : " '") << labels[i] << "'";
      if (labels.size() > 3) out << " and " << labels.size() - 3 << " more";
      out << ")";
      first = false;
    }
  return out.str();
}

}  // namespace weft
