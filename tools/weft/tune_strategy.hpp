// `weft tune --strategy S`: searches a strategy's knobs on the local GPUs. For every suite row and
// world size, every knob setting is predicted by the simulator, the best `keep` are checked against
// sequential and timed (as weft bench times), and the measured candidates, sequential's time with
// them, go into the tuning table (model/tuning_table.hpp) that auto and the strategies read.
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"
#include "weft/model/machine_profile.hpp"
#include "weft/model/tuning_table.hpp"

namespace weft::cli {

struct StrategyTuningOptions {
  std::string strategy;
  std::vector<int> world_sizes;
  std::vector<OpKind> ops;
  int keep = 3;
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  MachineProfile machine;
  std::string out;  // the table: read if it exists, entries of this run replace those of their shape
};

// The knob settings of `strategy` for `problem` (one setting without knobs where it has none).
std::vector<TunedCandidate> knob_grid(const std::string& strategy, const Problem& problem, const MachineProfile& machine);

// Returns the number of candidates whose result did not match sequential's.
int run_strategy_tuning(const BenchSuite& suite, const StrategyTuningOptions& options);

}  // namespace weft::cli
