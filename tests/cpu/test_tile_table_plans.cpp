// Tile tables with every feature the overlap GEMM executes (peer stores, remapped rows, per-tile
// notifies, a wait on the tiles' signal) are valid plans and mean what the ring-push plan says.
#include <gtest/gtest.h>

#include "../support/ring_push_plan.hpp"
#include "weft/core/plan_validation.hpp"
#include "weft/core/reference_executor.hpp"

namespace weft {
namespace {

TEST(TileTablePlans, RingPushIsValidAndComputesWhatItSays) {
  for (int world : {1, 2, 4, 8}) {
    const Plan plan = testing_support::ring_push_plan(world, 256, 200, 72);
    const ValidationReport report = validate_plan(plan);
    ASSERT_TRUE(report.ok()) << "world " << world << "\n" << report.summary();
    const auto inputs = random_inputs(plan.problem, 7 + static_cast<uint64_t>(world));
    const auto outputs = outputs_of(plan, run_reference(plan, inputs));
    for (int r = 0; r < world; ++r)
      EXPECT_LT(relative_error(outputs[static_cast<size_t>(r)], testing_support::ring_push_expected(inputs, r)), 1e-6)
          << "world " << world << " rank " << r;
  }
}

TEST(TileTablePlans, RingPushWithoutTheWaitIsARace) {
  Plan plan = testing_support::ring_push_plan(2, 128, 128, 64);
  for (RankPlan& rp : plan.ranks) rp.steps.pop_back();  // nobody waits for the pushed tiles
  EXPECT_FALSE(validate_plan(plan).ok());
}

}  // namespace
}  // namespace weft
