// judge_heuristic: which schedule was fastest per row, whether the heuristic's pick was it, and
// what the wrong picks cost.
#include <gtest/gtest.h>

#include "heuristic_judgement.hpp"

namespace weft {
namespace {

TEST(HeuristicJudgement, FindsTheFastestScheduleAndWhatTheWrongPicksCost) {
  const std::vector<TimedStrategy> timed = {
      // Row A: the pick (hetero_fused_1d) is the fastest.
      {"A", "sequential", 1.0, 1.0},
      {"A", "decomposed", 1.0, 0.7},  // not of the family: ignored
      {"A", "ficco_uniform_fused_1d", 1.0, 0.9},
      {"A", "ficco_hetero_fused_1d", 1.0, 0.8},
      {"A", "ficco=hetero_fused_1d", 1.0, 0.81},
      // Row B: the pick is 25% slower than the fastest.
      {"B", "ficco_uniform_fused_1d", 2.0, 1.0},
      {"B", "ficco_hetero_unfused_1d", 2.0, 1.25},
      {"B", "ficco=hetero_unfused_1d", 2.0, 1.24},
      // Row C: within the tolerance of the fastest counts as right.
      {"C", "ficco_uniform_fused_2d", 1.0, 0.500},
      {"C", "ficco_hetero_fused_1d", 1.0, 0.504},
      {"C", "ficco=hetero_fused_1d", 1.0, 0.5},
      // Row D: no heuristic row: not judged.
      {"D", "ficco_uniform_fused_1d", 1.0, 0.5},
  };
  const HeuristicJudgement j = judge_heuristic(timed, "ficco");
  ASSERT_EQ(j.judged, 3);
  EXPECT_EQ(j.right, 2);
  ASSERT_EQ(j.rows.size(), 3u);
  EXPECT_EQ(j.rows[0].row, "A");
  EXPECT_EQ(j.rows[0].best, "hetero_fused_1d");
  EXPECT_TRUE(j.rows[0].picked_best);
  EXPECT_DOUBLE_EQ(j.rows[0].best_speedup, 1.0 / 0.8);
  EXPECT_EQ(j.rows[1].best, "uniform_fused_1d");
  EXPECT_EQ(j.rows[1].picked, "hetero_unfused_1d");
  EXPECT_FALSE(j.rows[1].picked_best);
  EXPECT_NEAR(j.rows[1].loss, 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(j.rows[1].picked_speedup, 2.0 / 1.25) << "the pick is judged by its schedule's own row";
  EXPECT_TRUE(j.rows[2].picked_best);
  EXPECT_NEAR(j.mean_loss_when_wrong, 0.25, 1e-12);
}

TEST(HeuristicJudgement, NothingToJudgeWithoutTheFamily) {
  const HeuristicJudgement j = judge_heuristic({{"A", "sequential", 1, 1}, {"A", "decomposed", 1, 0.8}}, "ficco");
  EXPECT_EQ(j.judged, 0);
  EXPECT_TRUE(j.rows.empty());
  EXPECT_EQ(j.mean_loss_when_wrong, 0.0);
}

}  // namespace
}  // namespace weft
