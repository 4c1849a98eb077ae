// The rows `weft bench` recorded under bench/results (its --json and --csv files): the simulator is
// checked against them and `auto` is judged on them.
#pragma once

#include <string>
#include <vector>

#include "weft/ir/problem.hpp"

namespace weft::bench {

struct RecordedRow {
  std::string file;      // where it was read (the latest file wins for a repeated row)
  std::string row;       // the suite row's name
  Problem problem;       // per-rank shapes and dtype as measured (routing: drawn as weft bench draws it, seed 1)
  std::string strategy;  // as recorded; "ficco=S" (the heuristic's pick) is ficco_S
  double t_ms = 0, t_gemm_ms = 0, t_comm_ms = 0, t_seq_ms = 0;
};

// Every row of every weft bench JSON or CSV file in `folder` with world size >= min_world, one per
// (op, shape, world, strategy): the one from the file whose name sorts last (files are named by date).
std::vector<RecordedRow> read_recorded_rows(const std::string& folder, int min_world = 2);

}  // namespace weft::bench
