#include <gtest/gtest.h>

#include <cmath>

#include "../support/plan_options.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/ir/problem.hpp"
#include "weft/reference/reference_executor.hpp"

namespace weft {
namespace {

TEST(ReferenceExecutor, TimeoutNamesTheSignalInsteadOfHanging) {
  Problem p{OpKind::ag_gemm, 8, 8, 8, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_decomposed(p, {});
  for (auto& step : plan.ranks[1].steps) step.notifies.clear();  // rank 1 never says its shard arrived
  ReferenceOptions options;
  options.timeout = std::chrono::milliseconds(200);
  try {
    run_reference(plan, random_inputs(p, 1), options);
    FAIL() << "expected a timeout";
  } catch (const ReferenceTimeout& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("shard0_arrived"), std::string::npos) << what;
    EXPECT_NE(what.find(">= 1; its value is 0"), std::string::npos) << what;
  }
}

TEST(ReferenceExecutor, CollectiveMissingARankTimesOut) {
  Problem p{OpKind::gemm_ar, 8, 8, 8, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_sequential(p, {});
  plan.ranks[1].steps.pop_back();
  ReferenceOptions options;
  options.timeout = std::chrono::milliseconds(200);
  try {
    run_reference(plan, random_inputs(p, 1), options);
    FAIL() << "expected a timeout";
  } catch (const ReferenceTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("collective #0 (all_reduce) for ranks 1, which have not joined it"), std::string::npos) << e.what();
  }
}

// The fault drill's CPU half (scripts/fault_drill.sh runs it on GPUs): a rank that skips the call
// (stops before its first step: it never reaches the call's start barrier) or dies in it (stops
// halfway). Its peers never hang: the call either completes without it (what they needed was done)
// or times out with an error that names the op, the strategy and the stopped rank, as the one that
// has not started the call, not joined a collective, or that raises a counter a blocked wait needs.
TEST(ReferenceExecutor, APeerThatStopsIsNamedInsteadOfAHang) {
  constexpr int kWorld = 4, kStopped = 2;
  int skipped_named = 0, died_named = 0, died_completed = 0;
  for (OpKind op : all_ops())
    for (const Strategy& s : strategies()) {
      if (!s.supports(op) || s.name == "auto") continue;  // auto is one of the others
      Problem p{op, 32 * kWorld, 24, 16, kWorld, DType::bf16, DType::bf16, {}};
      draw_routing(p, 3);
      Plan plan;
      try {
        plan = s.build(p, testing_support::tiled(8, 8, Raster::along_m, 1));
      } catch (const std::invalid_argument&) {
        continue;  // a strategy that declines this small shape
      }
      const auto inputs = random_inputs(p, 4);
      const int steps = static_cast<int>(plan.ranks[kStopped].steps.size());
      for (const int before_stop : {0, steps / 2}) {
        const std::string what_case = std::string(to_string(op)) + " " + s.name + (before_stop == 0 ? " (skipped)" : " (died halfway)");
        // Short (this test waits for 50 timeouts), so it stays out of the TSan run (scripts/sanitize.sh),
        // where a live rank's work can take that long. Where a live rank is still working when the
        // wait gives up (ASan on a loaded machine: the report then names that slow rank), the case
        // runs once more with 8 times the time, and must name rank 2 then.
        for (const int timeout_ms : {250, 2000}) {
          ReferenceOptions options;
          options.timeout = std::chrono::milliseconds(timeout_ms);
          options.stopped_rank = kStopped;
          options.steps_before_stop = before_stop;
          try {
            run_reference(plan, inputs, options);
            EXPECT_NE(before_stop, 0) << what_case << ": completed although rank 2 ran nothing";
            died_completed += before_stop != 0;
            break;
          } catch (const ReferenceTimeout& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(std::string(to_string(op)) + " m="), std::string::npos) << what_case << ": the op is named\n" << what;
            EXPECT_NE(what.find("strategy " + plan.strategy), std::string::npos) << what_case << ": the strategy is named\n" << what;
            // Among the ranks that raise a blocked wait's counter, missing from a collective, or not at
            // the call's start barrier.
            const bool named = what.find("rank 2 (stream") != std::string::npos || what.find("rank 2 (GEMM tiles") != std::string::npos ||
                               what.find(" 2, which have not joined it") != std::string::npos ||
                               what.find(" 2, which have not started the call") != std::string::npos;
            if (!named && timeout_ms == 250) continue;  // a live rank was slow: once more, with time
            EXPECT_TRUE(named) << what_case << ": rank 2 is named\n" << what;
            (before_stop == 0 ? skipped_named : died_named) += named;
            break;
          }
        }
      }
    }
  EXPECT_GT(skipped_named, 20) << "every strategy of every op, skipped";
  EXPECT_GT(died_named + died_completed, 20);
}

TEST(ReferenceExecutor, UnwrittenOutputStaysPoisoned) {
  Problem p{OpKind::gemm_ar, 16, 16, 8, 1, DType::bf16, DType::bf16, {}};
  Plan plan = plan_sequential(p, testing_support::tiled(8, 8, Raster::along_m, 1));
  auto& gemm = std::get<GemmStep>(plan.ranks[0].steps[0].body);
  const Rect dropped = gemm.tiles.back().store.box;
  gemm.tiles.pop_back();
  const auto out = outputs_of(plan, run_reference(plan, random_inputs(p, 2)));
  EXPECT_TRUE(std::isnan(out[0].at(dropped.row, dropped.col)));
  EXPECT_FALSE(std::isnan(out[0].at(0, 0)));
}

TEST(ReferenceExecutor, RejectsMissingOrMisshapenInputs) {
  Problem p{OpKind::gemm_ar, 4, 4, 4, 2, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_sequential(p, {});
  auto inputs = random_inputs(p, 1);
  inputs[1]["B"] = HostMatrix(3, 4);
  EXPECT_THROW(run_reference(plan, inputs), std::invalid_argument);
  inputs.pop_back();
  EXPECT_THROW(run_reference(plan, inputs), std::invalid_argument);
}

TEST(ReferenceExecutor, RepeatedRunsGiveIdenticalResults) {
  Problem p{OpKind::gemm_rs, 24, 20, 12, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_decomposed(p, testing_support::tiled(8, 8, Raster::along_n, 2));
  const auto inputs = random_inputs(p, 5);
  const auto first = outputs_of(plan, run_reference(plan, inputs));
  for (int i = 0; i < 5; ++i) {
    const auto again = outputs_of(plan, run_reference(plan, inputs));
    for (size_t r = 0; r < first.size(); ++r) EXPECT_EQ(first[r].data, again[r].data);
  }
}

}  // namespace
}  // namespace weft
