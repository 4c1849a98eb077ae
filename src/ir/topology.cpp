#include "weft/ir/topology.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "weft/ir/plan.hpp"

namespace weft {

int Topology::nodes() const { return static_cast<int>(std::set<int>(node.begin(), node.end()).size()); }

bool Topology::fully_connected() const {
  for (int a = 0; a < world(); ++a)
    for (int b = 0; b < world(); ++b)
      if (!reaches(a, b)) return false;
  return true;
}

Topology Topology::single_node(int world) { return nodes_of(1, world); }

Topology Topology::nodes_of(int nodes, int per_node) {
  if (nodes < 1 || per_node < 1)
    throw std::invalid_argument("Topology::nodes_of: need at least one node of one rank, got " + std::to_string(nodes) + " x " +
                                std::to_string(per_node));
  Topology t;
  const int world = nodes * per_node;
  for (int r = 0; r < world; ++r) t.node.push_back(r / per_node);
  t.load_store.assign(static_cast<size_t>(world), std::vector<uint8_t>(static_cast<size_t>(world), 0));
  for (int a = 0; a < world; ++a)
    for (int b = 0; b < world; ++b) t.load_store[static_cast<size_t>(a)][static_cast<size_t>(b)] = t.node[static_cast<size_t>(a)] == t.node[static_cast<size_t>(b)];
  return t;
}

Topology Topology::no_load_store(int world) {
  Topology t = single_node(world);
  for (int a = 0; a < world; ++a)
    for (int b = 0; b < world; ++b) t.load_store[static_cast<size_t>(a)][static_cast<size_t>(b)] = a == b;
  return t;
}

std::string describe(const Topology& t) {
  std::ostringstream out;
  out << t.world() << " rank(s) on " << t.nodes() << " node(s), ";
  if (t.fully_connected()) out << "every pair reaches the other by load/store";
  else if (t.nodes() > 1 && t.nodes() < t.world()) out << "load/store within a node";
  else out << "no load/store between ranks";
  return out.str();
}

void require_reachable(const Plan& plan, const Topology& t) {
  if (t.world() != plan.world_size())
    throw std::invalid_argument("a topology of " + std::to_string(t.world()) + " ranks for a plan of " + std::to_string(plan.world_size()));
  for (const RankPlan& rp : plan.ranks) {
    auto check = [&](int other, const Step& step, const char* how) {
      if (t.reaches(rp.rank, other)) return;
      throw std::invalid_argument(plan.strategy + " needs ranks " + std::to_string(rp.rank) + " and " + std::to_string(other) +
                                  " to load/store each other's memory (step '" + step.label + "' " + how + "), and they cannot (" +
                                  describe(t) + "); strategies that communicate through NCCL alone run here: sequential, signal, two_level (and auto picks among them)");
    };
    for (const Step& step : rp.steps) {
      for (const Notify& n : step.notifies) check(n.signal.rank, step, "raises a signal there");
      if (const auto* gemm = std::get_if<GemmStep>(&step.body))
        for (const GemmTile& tile : gemm->tiles)
          if (tile.notify) check(tile.notify->signal.rank, step, "raises a signal there from a tile");
      // Collectives name only their own rank's memory (NCCL moves it).
      if (!std::holds_alternative<CollectiveStep>(step.body))
        for (const Region& r : regions_of(step.body)) check(r.rank, step, "touches a buffer there");
    }
  }
}

}  // namespace weft
