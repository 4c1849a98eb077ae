// Tile tables with every feature the overlap GEMM executes (peer stores, remapped rows, per-tile
// notifies, a wait on the tiles' signal) are valid plans and mean what the ring-push plan says.
#include <gtest/gtest.h>

#include "../support/ring_push_plan.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/reference_executor.hpp"

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

TEST(TileTablePlans, PlainTablesAreThoseOneLibraryGemmComputes) {
  auto gemms_of = [](const Plan& plan) {
    std::vector<GemmStep> gemms;
    for (const Step& step : plan.ranks.at(0).steps)
      if (const auto* g = std::get_if<GemmStep>(&step.body)) gemms.push_back(*g);
    return gemms;
  };
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) {
    const Problem p{op, 512, 384, 256, 2, DType::bf16, DType::bf16, {}};
    for (const Plan& plan : {plan_sequential(p, {}), plan_decomposed(p, {})})
      for (const GemmStep& g : gemms_of(plan)) EXPECT_TRUE(is_plain_tile_table(g)) << plan.strategy << " " << to_string(op);
  }
  for (const GemmStep& g : gemms_of(testing_support::ring_push_plan(2, 256, 256, 64))) EXPECT_FALSE(is_plain_tile_table(g));
  GemmStep one_notify = gemms_of(plan_sequential(Problem{OpKind::gemm_ar, 512, 384, 256, 1, DType::bf16, DType::bf16, {}}, {})).at(0);
  ASSERT_GT(one_notify.tiles.size(), 1u);
  one_notify.tiles.back().notify = Notify{SignalRef{0, 0}, 1};
  EXPECT_FALSE(is_plain_tile_table(one_notify));
  // A library GEMM writes the whole product: a table missing a tile, or one whose box would start
  // before its buffer (every tile shifted left by a column block, as a grouped MoE table of one
  // expert's tiles is), is not plain.
  GemmStep missing = gemms_of(plan_sequential(Problem{OpKind::gemm_ar, 512, 384, 256, 1, DType::bf16, DType::bf16, {}}, {})).at(0);
  missing.tiles.pop_back();
  EXPECT_FALSE(is_plain_tile_table(missing));
  GemmStep shifted = gemms_of(plan_sequential(Problem{OpKind::gemm_ar, 512, 384, 256, 1, DType::bf16, DType::bf16, {}}, {})).at(0);
  for (GemmTile& t : shifted.tiles) t.store.box.col -= 128;
  EXPECT_FALSE(is_plain_tile_table(shifted));
}

}  // namespace
}  // namespace weft
