#include <gtest/gtest.h>

#include <cmath>

#include "../support/plan_options.hpp"
#include "weft/plan/strategies.hpp"
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
    EXPECT_NE(std::string(e.what()).find("collective #0 for ranks 1"), std::string::npos) << e.what();
  }
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
