// Questions about a valid plan that executors ask once per plan, answered here so that the CPU
// tests check the answers: how each signal counter is raised in one call, and by whom.
//
// Counters start every call at zero (the CUDA executor resets its own before the call's barrier),
// so every wait and write is a value within one call.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/ir/plan.hpp"

namespace weft {

// Writers are (rank, stream) pairs; a GEMM tile's notify is written by the GEMM's epilogue, which
// is (rank, kTileWriter): several CTAs, never one ordered stream.
constexpr int kTileWriter = -1;

struct CounterRaises {
  uint64_t per_call = 0;                  // the sum of every increment in one call
  std::set<std::pair<int, int>> writers;  // (rank, stream), or (rank, kTileWriter)
};

// Every counter that anyone raises, keyed by (owner rank, signal id).
std::map<std::pair<int, int>, CounterRaises> counter_raises(const Plan& plan);

// For each step of `rank` (plan order) and each of its step-level notifies: the value the counter
// holds right after that notify within one call when this stream of this rank is its only writer
// (stream order then fixes the value, so it can be written without a kernel: no SM needed, which
// matters while a persistent GEMM holds them all); 0 where others raise the counter too (it must
// be added to atomically).
std::vector<std::vector<uint64_t>> single_writer_values(const Plan& plan, int rank);

// Who raises `rank`'s counter `signal` in a call, for a stuck wait's diagnosis: "raised by rank 2
// (stream 1: 'push partial to rank 0')" and the like; peers first, since a wait that a peer never
// meets is what a late or gone peer looks like. "raised by nobody" for a counter no step raises.
std::string describe_raisers(const Plan& plan, int rank, int signal);

// The ranks other than `rank` that raise `rank`'s counter `signal` (the peers its wait depends on).
std::set<int> peers_raising(const Plan& plan, int rank, int signal);

}  // namespace weft
