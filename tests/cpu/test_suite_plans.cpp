// Every benchmark suite row, cut for eight ranks, builds and validates for every strategy that takes
// its op (issue "Eight GPUs": what the CPU can check before an 8-GPU machine is lent). The plans are
// the real sizes, so only the static checks run (structure, liveness, signal balance, races, output
// coverage); the reference executor proves the same builders on small shapes at world 1-8.
#include <gtest/gtest.h>

#include "bench_suite.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"

namespace weft {
namespace {

class SuiteAtWorldEight : public testing::TestWithParam<std::string> {};

TEST_P(SuiteAtWorldEight, EveryRowBuildsAndValidatesForEveryStrategy) {
  const BenchSuite suite = load_suite(std::string(WEFT_BENCH_DIR) + "/" + GetParam() + ".json");
  int built = 0;
  for (const SuiteRow& row : suite.rows)
    for (const Strategy& s : strategies()) {
      if (!s.supports(row.op)) continue;
      const Problem p = problem_for(row, 8, 1);
      PlanOptions o;
      o.tile_n = 256;  // the tile weft bench gives library-GEMM strategies
      Plan plan;
      try {
        plan = s.build(p, o);
      } catch (const std::invalid_argument& e) {
        // Every strategy lays out every row at world 8 (signal's gemm_rs included: GPT-3 RS m = 64
        // and 512 give 8 and 64 rows per rank, less than a 128-row tile).
        ADD_FAILURE() << row.name << " " << s.name << " declined: " << e.what();
        continue;
      }
      const ValidationReport report = validate_plan(plan);
      EXPECT_TRUE(report.ok()) << row.name << " " << s.name << ":\n" << report.summary();
      ++built;
    }
  EXPECT_GT(built, 0);
}

INSTANTIATE_TEST_SUITE_P(Suites, SuiteAtWorldEight,
                         testing::Values("default", "tilelink_mlp", "flux_gpt3", "flashoverlap_ar", "tilelink_moe", "tilelink_moe_tp", "moe_models"));

}  // namespace
}  // namespace weft
