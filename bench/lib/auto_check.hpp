// What `auto` would have chosen on the rows weft bench recorded, judged by their measurements:
// leave one shape out (the tuning table is built from every other recorded shape, so no shape
// judges its own choice), candidates limited to the strategies recorded for the shape, so that every
// choice has a measured time.
#pragma once

#include <string>
#include <vector>

#include "recorded_results.hpp"
#include "weft/model/tuning_table.hpp"

namespace weft::bench {

// A tuning table of recorded rows (one entry per op, world and shape; `skip`: leave out this one).
TuningTable tuning_table_from(const std::vector<RecordedRow>& rows, const std::string& machine, const Problem* skip = nullptr);

struct AutoJudged {
  std::string row;
  Problem problem;
  std::string picked, best, reason;
  double picked_ms = 0, best_ms = 0, sequential_ms = 0;
  bool from_table = false;
};

struct AutoJudgement {
  std::vector<AutoJudged> rows;
  int never_slower = 0;   // picked_ms <= sequential_ms (within `noise`)
  int near_best = 0;      // picked_ms <= 1.05 best_ms
};

// use_table false: the simulator alone.
AutoJudgement judge_auto(const std::vector<RecordedRow>& rows, const MachineProfile& machine, bool use_table, double noise = 0.005);

}  // namespace weft::bench
