// Judges a schedule-picking heuristic against measurements: per benchmark row, the fastest of a
// family of strategies (e.g. every "ficco_*" schedule), the one the heuristic picked (its row is
// named "<family>=<schedule>", e.g. "ficco=hetero_fused_1d"), and what picking it cost. FiCCO
// reports its heuristic this way (ficco.txt, Section V-C: right in 81% of cases, ~14% loss when
// wrong); `weft bench` prints the judgement after its table.
//
//   std::vector<TimedStrategy> timed = ...;                      // one per (row, strategy)
//   HeuristicJudgement j = judge_heuristic(timed, "ficco");
//   j.rows[i].picked_best, j.rows[i].loss; j.right, j.judged, j.mean_loss_when_wrong
#pragma once

#include <string>
#include <vector>

namespace weft {

struct TimedStrategy {
  std::string row;       // the benchmark row (one problem at one world size)
  std::string strategy;  // "ficco_hetero_fused_1d", or the heuristic's "ficco=hetero_fused_1d"
  double t_seq = 0;      // the sequential baseline of that row
  double t = 0;          // this strategy's time
};

struct JudgedRow {
  std::string row;
  std::string best;         // the fastest schedule of the family (without the family prefix)
  double best_speedup = 0;  // t_seq / t of the fastest
  std::string picked;       // the heuristic's schedule
  double picked_speedup = 0;
  bool picked_best = false;  // within `tolerance` of the fastest time
  double loss = 0;           // t_picked / t_best - 1
};

struct HeuristicJudgement {
  std::vector<JudgedRow> rows;
  int judged = 0;
  int right = 0;
  double mean_loss_when_wrong = 0;
};

// Rows without a heuristic pick, or whose pick was not timed as a schedule of its own, are
// skipped. Ties within `tolerance` (relative time) count as right: medians of GPU timings move
// by about that much between runs.
HeuristicJudgement judge_heuristic(const std::vector<TimedStrategy>& timed, const std::string& family,
                                   double tolerance = 0.01);

}  // namespace weft
