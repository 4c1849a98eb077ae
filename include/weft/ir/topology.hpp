// Which ranks share a node and which pairs can load and store each other's memory (NVLink or PCIe
// P2P): what decides whether a plan that reaches into a peer's memory can run, or only plans that
// communicate through NCCL. The communicator measures it (Communicator::topology); plan builders
// and tests state it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft {

struct Plan;

struct Topology {
  std::vector<int> node;                          // node of each rank
  std::vector<std::vector<uint8_t>> load_store;   // [a][b]: rank a can load/store rank b's memory

  int world() const { return static_cast<int>(node.size()); }
  int nodes() const;
  bool reaches(int a, int b) const { return a == b || load_store.at(static_cast<size_t>(a)).at(static_cast<size_t>(b)) != 0; }
  // Every pair reaches every other: one node with P2P between all of its GPUs.
  bool fully_connected() const;

  // One node, every GPU reaching every other (today's single-node machines).
  static Topology single_node(int world);
  // `nodes` nodes of `per_node` ranks each (ranks numbered node by node), load/store within a node only.
  static Topology nodes_of(int nodes, int per_node);
  // No pair reaches another (WEFT_P2P=0, or GPUs without P2P): NCCL alone moves data.
  static Topology no_load_store(int world);
};

std::string describe(const Topology& topology);

// Throws std::invalid_argument naming the first pair of ranks that a step of `plan` connects (a
// region of a peer's buffer, a peer's signal) although they cannot load/store each other, and the
// strategies that communicate through NCCL alone.
void require_reachable(const Plan& plan, const Topology& topology);

}  // namespace weft
