// The MoE routing tables computed from the choices alone (plan/moe_route.hpp) against what the plans
// list today: moe_rows' layout, and sequential's expert-major gather, grouped GEMM and scatter back.
#include <gtest/gtest.h>

#include <set>

#include "weft/ir/plan.hpp"
#include "weft/ir/problem.hpp"
#include "weft/plan/moe_route.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft {
namespace {

std::vector<int32_t> stacked(const std::vector<std::vector<int>>& choices) {
  std::vector<int32_t> all;
  for (const auto& rank : choices) all.insert(all.end(), rank.begin(), rank.end());
  return all;
}

const PermuteRowsStep* permute_labelled(const RankPlan& rp, const std::string& label) {
  for (const Step& s : rp.steps)
    if (s.label == label) return &std::get<PermuteRowsStep>(s.body);
  return nullptr;
}

struct Case {
  int world;
  int64_t m;
  int experts, topk;
  double skew;
};

TEST(MoeRoute, MatchesTheLayoutAndSequentialsExpertMajorPlanOnRandomRoutings) {
  int checked_grouped = 0;
  uint64_t seed = 1;
  for (const Case& c : std::vector<Case>{{1, 96, 8, 2, 0.0}, {2, 64, 8, 2, 0.9}, {4, 48, 6, 3, 0.0}, {3, 40, 5, 1, 0.5}, {4, 64, 16, 2, 0.95},
                                         {8, 16, 8, 2, 0.0}, {2, 7, 4, 4, 0.0}, {1, 5, 64, 2, 0.0}})
    for (int64_t n : {384, 200}) {  // 384: the grouped GEMM on 128-row expert blocks; 200: a GEMM per expert, unaligned
      Problem p{OpKind::ag_moe, c.m, n, 256, c.world, DType::bf16, DType::bf16, {}};
      p.experts = c.experts;
      p.topk = c.topk;
      p.choices = random_choices(c.world, c.m, c.experts, c.topk, ++seed, c.skew);
      const int64_t align = n % 128 == 0 ? 128 : 1;
      const MoeRouteTables t = route_moe_rows(stacked(p.choices), c.world, c.m, c.topk, c.experts, align);
      const std::string what = "world " + std::to_string(c.world) + " m " + std::to_string(c.m) + " experts " + std::to_string(c.experts) +
                               " topk " + std::to_string(c.topk) + " n " + std::to_string(n);

      // The op layout: moe_rows' row of every (token, choice).
      const MoeRows rows = moe_rows(p);
      ASSERT_EQ(t.layout_row.size(), rows.row_of.size()) << what;
      for (size_t i = 0; i < rows.row_of.size(); ++i) ASSERT_EQ(t.layout_row[i], rows.row_of[i]) << what << ", pair " << i;

      // The expert-major scratch: sized whatever the routing, each layout row in it once, padding -1.
      ASSERT_EQ(static_cast<int64_t>(t.expert_row.size()), moe_route_capacity(c.world, c.m, c.topk, c.experts, align)) << what;
      std::set<int32_t> seen;
      for (int32_t r : t.expert_row)
        if (r >= 0) {
          EXPECT_TRUE(seen.insert(r).second) << what << ": layout row " << r << " twice";
        }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), rows.rows()) << what;

      // Sequential's plan: its gather lists each scratch row's token, its scatter back each layout row's scratch row.
      const Plan plan = make_plan(find_strategy("sequential"), p, PlanOptions{});
      const RankPlan& rp = plan.ranks.at(0);
      const PermuteRowsStep* gather = permute_labelled(rp, "gather every rank's rows by expert");
      ASSERT_NE(gather, nullptr) << what;
      ASSERT_EQ(static_cast<int32_t>(gather->source_rows.size()), t.expert_first.back()) << what;
      for (size_t x = 0; x < gather->source_rows.size(); ++x)
        if (t.expert_row[x] >= 0) {
          ASSERT_EQ(gather->source_rows[x], rows.token[static_cast<size_t>(t.expert_row[x])]) << what << ", row " << x;
        }
      std::vector<int64_t> scratch_row_of(static_cast<size_t>(rows.rows()), -1);
      for (size_t x = 0; x < t.expert_row.size(); ++x)
        if (t.expert_row[x] >= 0) scratch_row_of[static_cast<size_t>(t.expert_row[x])] = static_cast<int64_t>(x);
      if (const PermuteRowsStep* back = permute_labelled(rp, "rows back by source")) {
        ASSERT_EQ(back->source_rows, scratch_row_of) << what;
      } else {
        for (int64_t r = 0; r < rows.rows(); ++r) ASSERT_EQ(scratch_row_of[static_cast<size_t>(r)], r) << what << ": no scatter back, so the identity";
      }
      // Each expert's rows where its GEMM (or its tiles of the grouped GEMM) reads them.
      for (const Step& s : rp.steps) {
        const auto* gemm = std::get_if<GemmStep>(&s.body);
        if (!gemm) continue;
        if (s.label.rfind("grouped gemm", 0) == 0) {
          ++checked_grouped;
          for (const GemmTile& tile : gemm->tiles) {
            const int e = static_cast<int>(tile.tile.col / n);
            EXPECT_EQ((tile.tile.row - t.expert_first[static_cast<size_t>(e)]) % 128, 0) << what << ": expert " << e;
            EXPECT_GE(tile.tile.row, t.expert_first[static_cast<size_t>(e)]) << what << ": expert " << e;
          }
        } else {
          const int e = std::stoi(s.label.substr(s.label.find("expert ") + 7));
          EXPECT_EQ(gemm->a.box.row, t.expert_first[static_cast<size_t>(e)]) << what << ": expert " << e;
          EXPECT_EQ(gemm->a.box.rows, t.expert_first[static_cast<size_t>(e) + 1] - t.expert_first[static_cast<size_t>(e)]) << what;
        }
      }
    }
  EXPECT_GT(checked_grouped, 4) << "the grouped GEMM's expert blocks were compared";
}

TEST(MoeRoute, RefusesAChoiceOutOfRangeOrAMismatchedSize) {
  const std::vector<int32_t> choices{0, 1, 2, 3};
  EXPECT_NO_THROW(route_moe_rows(choices, 2, 1, 2, 4, 128));
  try {
    route_moe_rows(std::vector<int32_t>{0, 1, 4, 3}, 2, 1, 2, 4, 128);
    FAIL() << "expert 4 of 4 taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("choice 2 (rank 1, token 0, choice 0) is expert 4, not in [0, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(route_moe_rows(choices, 2, 2, 2, 4, 128), std::invalid_argument);  // 8 choices expected
  EXPECT_THROW(route_moe_rows(std::vector<int32_t>{-1}, 1, 1, 1, 4, 1), std::invalid_argument);
}

TEST(MoeRoute, PadsOnlyBeforeExpertsWithRowsAndEndsWithinTheCapacity) {
  // Experts 1 and 3 picked by nobody: no padding for them (they start where the rows before end),
  // every other expert's first row on the grid.
  const std::vector<int32_t> choices{0, 2, 0, 4, 2, 2};  // world 1, m 3, topk 2
  const MoeRouteTables t = route_moe_rows(choices, 1, 3, 2, 5, 128);
  EXPECT_EQ(t.expert_first, (std::vector<int32_t>{0, 2, 128, 131, 256, 257}));
  EXPECT_EQ(t.layout_row, (std::vector<int32_t>{0, 2, 1, 5, 3, 4}));
  EXPECT_EQ(t.expert_row[0], 0);
  EXPECT_EQ(t.expert_row[1], 1);
  EXPECT_EQ(t.expert_row[2], -1);
  EXPECT_EQ(t.expert_row[128], 2);
  EXPECT_EQ(t.expert_row[130], 4);
  EXPECT_EQ(t.expert_row[256], 5);
  EXPECT_LE(t.expert_first.back(), static_cast<int32_t>(t.expert_row.size()));
}

// The MoE ops with the choices given on the device (Problem::routing_on_device): sequential's routed
// plan (route, index permutes, routed grouped GEMM, index combine) validates and computes the op on
// the reference executor, whose route runs route_moe_rows on each run's choices (random per seed).
TEST(MoeRoute, RowTilesCoverEveryExpertsRowsOnceWithTheirSourcesInArrivalOrder) {
  uint64_t seed = 500;
  for (const Case& c : std::vector<Case>{{1, 300, 8, 2, 0.0}, {2, 200, 4, 2, 0.0}, {3, 97, 5, 3, 0.7}, {8, 64, 8, 2, 0.0}, {8, 40, 16, 4, 0.9}}) {
    const std::vector<int32_t> choices = stacked(random_choices(c.world, c.m, c.experts, c.topk, ++seed, c.skew));
    const MoeRouteTables t = route_moe_rows(choices, c.world, c.m, c.topk, c.experts, 128);
    const int64_t per_source = c.m * c.topk;
    for (int rank = 0; rank < c.world; ++rank) {
      SCOPED_TRACE("world " + std::to_string(c.world) + " rank " + std::to_string(rank));
      const std::vector<RoutedRowTile> tiles = routed_row_tiles(t, c.world, c.m, c.topk, 128, rank);
      std::vector<int> covered(t.expert_row.size(), 0);
      int32_t last_stage = 0, last_row = -1;
      for (const RoutedRowTile& tile : tiles) {
        ASSERT_EQ(tile.row % 128, 0);
        ASSERT_GE(tile.rows, 1);
        ASSERT_LE(tile.rows, 128);
        ASSERT_GE(tile.row, t.expert_first[static_cast<size_t>(tile.expert)]);
        ASSERT_LE(tile.row + tile.rows, t.expert_first[static_cast<size_t>(tile.expert) + 1]);
        int32_t lowest = c.world, highest = -1, stage = 0, previous = -1;
        for (int64_t r = tile.row; r < tile.row + tile.rows; ++r) {
          const int32_t layout = t.expert_row[static_cast<size_t>(r)];
          ASSERT_GE(layout, 0) << "row " << r << " is padding";
          ++covered[static_cast<size_t>(r)];
          const int32_t s = static_cast<int32_t>(layout / per_source);
          EXPECT_GE(s, previous) << "an expert's rows out of source order";
          previous = s;
          lowest = std::min(lowest, s);
          highest = std::max(highest, s);
          stage = std::max(stage, (s - rank + c.world) % c.world);
        }
        EXPECT_EQ(tile.source_first, lowest);
        EXPECT_EQ(tile.source_last, highest);
        EXPECT_EQ(tile.stage, stage);
        // Stage-major, then by row.
        EXPECT_TRUE(tile.stage > last_stage || (tile.stage == last_stage && tile.row > last_row)) << "tile at row " << tile.row;
        last_stage = tile.stage;
        last_row = tile.row;
      }
      for (size_t r = 0; r < covered.size(); ++r) EXPECT_EQ(covered[r], t.expert_row[r] >= 0 ? 1 : 0) << "scratch row " << r;
    }
  }
  // A route off the tiles' grid is refused.
  const std::vector<int32_t> choices = stacked(random_choices(2, 50, 4, 2, 9));
  EXPECT_THROW(routed_row_tiles(route_moe_rows(choices, 2, 50, 2, 4, 64), 2, 50, 2, 128, 0), std::invalid_argument);
}

Problem routed_problem(OpKind op, int world, int64_t m, int64_t n, int experts, int topk) {
  Problem p{op, m, n, 32, world, DType::bf16, DType::bf16, {}};
  if (op == OpKind::moe_rs) p.k = 24;
  p.experts = experts;
  p.topk = topk;
  p.routing_on_device = true;
  return p;
}

TEST(MoeRoutedPlan, SequentialProvesAtWorldsOneToEightOnFreshRoutings) {
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs})
    for (int world = 1; world <= 8; ++world)
      for (const auto& [experts, topk] : std::vector<std::pair<int, int>>{{4, 2}, {8, 1}, {3, 3}}) {
        const Problem p = routed_problem(op, world, world <= 4 ? 12 : 5, world % 2 ? 96 : 128, experts, topk);
        const Plan plan = make_plan(find_strategy("sequential"), p, PlanOptions{});
        for (uint64_t seed = 1; seed <= 2; ++seed) {
          const CpuProof proof = prove_on_cpu(plan, seed * 31 + static_cast<uint64_t>(world));
          ASSERT_TRUE(proof.passed()) << describe(p) << " seed " << seed << ": " << proof.explain() << to_string(plan);
        }
      }
}

TEST(MoeRoutedPlan, OnePlanServesEveryRoutingAndTheRouteIsWhatItReads) {
  // The plan does not depend on the choices: one plan, proved on several routings (the inputs' choices
  // differ per seed). And it reads what the route wrote: the route told to give layout rows where the
  // gather wants tokens computes another op, which the proof catches.
  const Problem p = routed_problem(OpKind::ag_moe, 2, 16, 128, 4, 2);
  const Plan plan = make_plan(find_strategy("sequential"), p, PlanOptions{});
  for (uint64_t seed = 10; seed < 14; ++seed) EXPECT_TRUE(prove_on_cpu(plan, seed).passed()) << "seed " << seed;
  Plan broken = plan;
  for (RankPlan& rp : broken.ranks)
    for (Step& s : rp.steps)
      if (auto* route = std::get_if<RouteStep>(&s.body)) route->source = RouteSource::layout_row;
  const CpuProof proof = prove_on_cpu(broken, 10);
  EXPECT_FALSE(proof.passed()) << "a route giving layout rows to the token gather must compute a wrong result";
}

TEST(MoeRoutedPlan, TheChecksRefuseAPlanWithoutItsRouteOrWithTablesOfTheWrongSize) {
  const Problem p = routed_problem(OpKind::moe_rs, 2, 8, 96, 4, 2);
  const Plan plan = make_plan(find_strategy("sequential"), p, PlanOptions{});
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  Plan no_route = plan;
  for (RankPlan& rp : no_route.ranks)
    std::erase_if(rp.steps, [](const Step& s) { return std::holds_alternative<RouteStep>(s.body); });
  const ValidationReport unrouted = validate_plan(no_route);
  EXPECT_FALSE(unrouted.ok());
  EXPECT_NE(unrouted.summary().find("which no route of this rank writes"), std::string::npos) << unrouted.summary();
  Plan short_table = plan;
  for (RankPlan& rp : short_table.ranks)
    for (Step& s : rp.steps)
      if (auto* route = std::get_if<RouteStep>(&s.body)) route->pair_scratch->box.rows -= 1;
  const ValidationReport sized = validate_plan(short_table);
  EXPECT_FALSE(sized.ok());
  EXPECT_NE(sized.summary().find("one entry per (token, choice)"), std::string::npos) << sized.summary();
}

TEST(MoeRoutedPlan, TheChecksRefuseATableReadAsAnotherAndARouteOffTheGemmsGrid) {
  const Problem p = routed_problem(OpKind::ag_moe, 2, 8, 128, 4, 2);
  const Plan plan = make_plan(find_strategy("sequential"), p, PlanOptions{});
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  // The rows put back by the scratch's token table instead of the layout's scratch rows: on the GPU
  // an out-of-range read.
  Plan misread = plan;
  for (RankPlan& rp : misread.ranks) {
    const RouteStep* route = nullptr;
    for (const Step& s : rp.steps)
      if (const auto* r = std::get_if<RouteStep>(&s.body)) route = r;
    ASSERT_NE(route, nullptr);
    const Region tokens = route->scratch_source;
    for (Step& s : rp.steps)
      if (s.label == "rows back by source") std::get<PermuteRowsStep>(s.body).index = tokens;
  }
  const ValidationReport misread_report = validate_plan(misread);
  EXPECT_FALSE(misread_report.ok());
  EXPECT_NE(misread_report.summary().find("the route's table is for"), std::string::npos) << misread_report.summary();
  // A route aligned to 64 rows under a GEMM of 128-row tiles: an expert would start inside a tile.
  Plan off_grid = plan;
  for (RankPlan& rp : off_grid.ranks)
    for (Step& s : rp.steps)
      if (auto* r = std::get_if<RouteStep>(&s.body)) r->align = 64;
  const ValidationReport grid_report = validate_plan(off_grid);
  EXPECT_FALSE(grid_report.ok());
  EXPECT_NE(grid_report.summary().find("an expert would start inside a tile"), std::string::npos) << grid_report.summary();
}

TEST(MoeRoutedPlan, OnlySequentialPlansItAndAutoTakesSequential) {
  const Problem p = routed_problem(OpKind::ag_moe, 4, 16, 128, 8, 2);
  EXPECT_EQ(make_plan(find_strategy("auto"), p, PlanOptions{}).strategy, "auto=sequential");
  for (const char* name : {"decomposed", "tilelink"}) {
    try {
      make_plan(find_strategy(name), p, PlanOptions{});
      FAIL() << name << " planned the choices given on the device";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("declines the MoE choices given on the device"), std::string::npos) << e.what();
    }
  }
  // N of no grouped GEMM width: the routed plan has no per-expert form.
  EXPECT_THROW(make_plan(find_strategy("sequential"), routed_problem(OpKind::ag_moe, 2, 8, 100, 4, 2), PlanOptions{}), std::invalid_argument);
  // device_routing_gap, what a caller asks before taking this path, says the same as make_plan: empty
  // where it plans, the reason where it throws.
  for (const char* name : {"sequential", "auto"}) EXPECT_EQ(device_routing_gap(name, p), "") << name;
  for (const char* name : {"decomposed", "tilelink"})
    EXPECT_NE(device_routing_gap(name, p).find("'" + std::string(name) + "' declines the MoE choices given on the device"), std::string::npos);
  const Problem narrow = routed_problem(OpKind::ag_moe, 2, 8, 100, 4, 2);
  EXPECT_NE(device_routing_gap("sequential", narrow).find("runs the grouped GEMM only"), std::string::npos);
  EXPECT_EQ(device_routing_gap("sequential", routed_problem(OpKind::moe_rs, 8, 8, 96, 1024, 2)), "");  // 8,192 blocks: the most
  const Problem wide = routed_problem(OpKind::moe_rs, 8, 8, 96, 1025, 2);
  EXPECT_NE(device_routing_gap("sequential", wide).find("at most 8192 (rank, expert) blocks"), std::string::npos);
  // A problem with the choices on the device gives no table to moe_rows, and takes none.
  EXPECT_THROW(moe_rows(p), std::invalid_argument);
  Problem both = p;
  both.choices = random_choices(4, 16, 8, 2, 1);
  EXPECT_THROW(check_problem(both), std::invalid_argument);
}

}  // namespace
}  // namespace weft
