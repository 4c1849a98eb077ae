// `tilelink` (TileLink): the communication is one companion launch on its own SMs, with its own
// tile; GEMM tiles wait for (AG) or count on (RS) communication tiles; the plans are proved like
// every other, and a plan with a wait taken out is caught.
#include <gtest/gtest.h>

#include <set>

#include "../support/plan_options.hpp"
#include "weft/model/simulator.hpp"
#include "weft/model/tiling.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/cpu_proof.hpp"
#include "weft/ir/tile_map.hpp"

namespace weft {
namespace {

PlanOptions small_machine(int tile_m, int tile_n, int64_t comm_rows, int comm_sms = 3) {
  PlanOptions o = testing_support::tiled(tile_m, tile_n, Raster::along_m, 2);
  o.machine.sm_count = 12;
  o.tilelink.comm_sms = comm_sms;
  o.tilelink.comm_tile_rows = comm_rows;
  return o;
}

const GemmStep& gemm_of(const RankPlan& rank) {
  for (const Step& step : rank.steps)
    if (const auto* g = std::get_if<GemmStep>(&step.body)) return *g;
  throw std::logic_error("no GEMM");
}

TEST(TileMaps, StaticMapCutsEachRankIntoChannelsAndFindsRows) {
  const tile::StaticTileMap map{3, 100, 32};  // 32, 32, 32, 4 rows per rank
  EXPECT_EQ(map.channels(), 4);
  EXPECT_EQ(map.tiles(), 12);
  int64_t next = 0;
  for (int id = 0; id < map.tiles(); ++id) {
    const tile::TileCoord t = map(id);
    EXPECT_EQ(t.rank, id / 4);
    EXPECT_EQ(t.channel, id % 4);
    EXPECT_EQ(t.row, next) << "tiles cover the rows in order, without gaps";
    EXPECT_EQ(t.rows, t.channel == 3 ? 4 : 32);
    for (int64_t row = t.row; row < t.row + t.rows; ++row) ASSERT_EQ(map.tile_of_row(row), id) << row;
    next += t.rows;
  }
  EXPECT_EQ(next, 300);
}

TEST(TileMaps, CommunicationTileIsAboutAQuarterInWholeGemmTiles) {
  EXPECT_EQ(choose_comm_tile_rows(4096, 128), 1024);
  EXPECT_EQ(choose_comm_tile_rows(1000, 128), 256);  // 250 rounded up to whole tiles
  EXPECT_EQ(choose_comm_tile_rows(64, 128), 64);     // never more than the rank has
  EXPECT_EQ(choose_comm_tile_rows(300, 128), 128);
}

TEST(TileLinkPlans, AllGatherCompanionPullsInRingOrderAndTilesWaitForTheirRows) {
  // 3 ranks of 100 rows, communication tiles of 48 rows (48, 48, 4), GEMM tiles of 32: ragged both ways.
  const Problem p{OpKind::ag_gemm, 100, 40, 16, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_tilelink(p, small_machine(32, 16, 48));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  for (const RankPlan& rank : plan.ranks) {
    const int r = rank.rank;
    std::vector<std::pair<int, int64_t>> moved;  // (source rank, gathered first row) in companion order
    for (const Step& step : rank.steps) {
      if (std::holds_alternative<GemmStep>(step.body)) {
        EXPECT_EQ(step.companion, -1);
        continue;
      }
      const auto& copy = std::get<CopyStep>(step.body);
      EXPECT_EQ(step.companion, 0);
      EXPECT_EQ(step.stream, 1);
      EXPECT_EQ(step.engine, Engine::sm);
      EXPECT_EQ(copy.sms, 3);
      EXPECT_EQ(copy.dst.rank, r);
      moved.push_back({copy.src.rank, copy.dst.box.row});
    }
    ASSERT_EQ(moved.size(), 9u);
    // Own shard first, then rank r+1's tiles, then rank r+2's.
    for (size_t k = 0; k < moved.size(); ++k) EXPECT_EQ(moved[k].first, (r + static_cast<int>(k / 3)) % 3) << k;
    EXPECT_EQ(moved[3].second, ((r + 1) % 3) * 100);
    EXPECT_EQ(moved[4].second, ((r + 1) % 3) * 100 + 48);
    const GemmStep& g = gemm_of(rank);
    EXPECT_EQ(g.sm_limit, 12 - 3) << "the GEMM keeps the SMs the companion leaves";
    uint64_t previous = 0;
    for (const GemmTile& t : g.tiles) {
      uint64_t want = 0;  // the last communication tile in companion order that holds one of its rows
      for (size_t k = 0; k < moved.size(); ++k) {
        const int64_t first = moved[k].second, rows = (first % 100 == 96) ? 4 : 48;
        if (first < t.tile.row_end() && t.tile.row < first + rows) want = std::max<uint64_t>(want, k + 1);
      }
      ASSERT_TRUE(t.wait.has_value());
      EXPECT_EQ(t.wait->value, want) << "tile at row " << t.tile.row;
      EXPECT_GE(t.wait->value, previous) << "tiles run in their rows' arrival order";
      previous = t.wait->value;
    }
  }
}

TEST(TileLinkPlans, AllGatherAllToAllOrderTakesTileCOfEveryPeerInTurn) {
  const Problem p{OpKind::ag_gemm, 64, 16, 16, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o = small_machine(16, 16, 32);
  o.tilelink.ring = false;
  const Plan plan = plan_tilelink(p, o);
  std::vector<std::pair<int, int64_t>> moved;
  for (const Step& step : plan.ranks[1].steps)
    if (const auto* copy = std::get_if<CopyStep>(&step.body)) moved.push_back({copy->src.rank, copy->src.box.row});
  const std::vector<std::pair<int, int64_t>> want = {{1, 0}, {1, 32}, {2, 0}, {3, 0}, {0, 0}, {2, 32}, {3, 32}, {0, 32}};
  EXPECT_EQ(moved, want);
  EXPECT_TRUE(prove_on_cpu(plan, 5).passed());
}

TEST(TileLinkPlans, ReduceScatterCountsTilesOnTheOwnerWhoReducesInRingOrder) {
  const int world = 4;
  const Problem p{OpKind::gemm_rs, world * 64, 48, 24, world, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_tilelink(p, small_machine(16, 16, 32));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  for (const RankPlan& rank : plan.ranks) {
    const int r = rank.rank;
    const GemmStep& g = gemm_of(rank);
    // Blocks in ring order after the own one; each tile stored locally, counted on its rows' owner.
    int previous_step = 0;
    for (const GemmTile& t : g.tiles) {
      const int owner = static_cast<int>(t.tile.row / 64);
      const int ring_step = (owner - r - 1 + world) % world;
      EXPECT_GE(ring_step, previous_step);
      previous_step = ring_step;
      EXPECT_EQ(t.store.rank, r);
      ASSERT_TRUE(t.notify.has_value());
      EXPECT_EQ(t.notify->signal.rank, owner);
    }
    // The companion: 2 communication tiles per rank, from rank r-1 first, the own partials last.
    std::vector<std::pair<int, bool>> reduced;  // (source rank, accumulate)
    for (const Step& step : rank.steps)
      if (const auto* sum = std::get_if<ReduceStep>(&step.body)) {
        EXPECT_EQ(step.companion, 0);
        ASSERT_EQ(sum->srcs.size(), 1u);
        ASSERT_EQ(step.waits.size(), 1u);
        EXPECT_EQ(step.waits[0].value, 2u * 3u) << "2 GEMM tile rows x 3 tile columns per communication tile";
        reduced.push_back({sum->srcs[0].rank, sum->accumulate});
      }
    ASSERT_EQ(reduced.size(), 8u);
    for (size_t k = 0; k < reduced.size(); ++k) {
      EXPECT_EQ(reduced[k].first, (r - 1 - static_cast<int>(k / 2) + 2 * world) % world) << k;
      EXPECT_EQ(reduced[k].second, k >= 2) << "the first rank's partials define C, the others add";
    }
  }
  EXPECT_TRUE(prove_on_cpu(plan, 3).passed());
}

TEST(TileLinkPlans, ReduceScatterRelaysGemmTilesThatHoldTwoRanksRows) {
  // 3 ranks of 40 rows, 32-row GEMM tiles: tile rows [32, 64) and [64, 96) hold two ranks' rows.
  const Problem p{OpKind::gemm_rs, 3 * 40, 16, 16, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_tilelink(p, small_machine(32, 16, 0));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  for (const RankPlan& rank : plan.ranks) {
    const GemmStep& g = gemm_of(rank);
    ASSERT_GE(g.tiles.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {  // the spanning tile rows first (one tile column each), counted locally
      EXPECT_TRUE(g.tiles[i].tile.row == 32 || g.tiles[i].tile.row == 64) << g.tiles[i].tile.row;
      EXPECT_EQ(g.tiles[i].notify->signal.rank, rank.rank);
    }
    const Step* relay = nullptr;
    for (const Step& step : rank.steps)
      if (std::holds_alternative<JoinStep>(step.body)) relay = &step;
    ASSERT_NE(relay, nullptr);
    EXPECT_EQ(relay->companion, 0);
    EXPECT_EQ(relay->notifies.size(), 3u) << "tile rows [32, 64) touch ranks 0 and 1, [64, 96) ranks 1 and 2";
  }
  EXPECT_TRUE(prove_on_cpu(plan, 7).passed()) << prove_on_cpu(plan, 7).explain();
}

TEST(TileLinkPlans, NotForAllReduce) {
  EXPECT_THROW(plan_tilelink(Problem{OpKind::gemm_ar, 64, 16, 16, 2, DType::bf16, DType::bf16, {}}, {}), std::invalid_argument);
}

TEST(TileLinkPlans, CommSmsMustLeaveTheGemmSomething) {
  const Problem p{OpKind::ag_gemm, 64, 16, 16, 2, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(plan_tilelink(p, small_machine(16, 16, 0, 12)), std::invalid_argument);
  EXPECT_THROW(plan_tilelink(p, small_machine(16, 16, 0, 0)), std::invalid_argument);
}

TEST(TileLinkPlans, AMissingWaitIsCaught) {
  // AllGather: a GEMM tile that no longer waits for its pulled rows reads them too early.
  const Problem ag{OpKind::ag_gemm, 64, 32, 16, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_tilelink(ag, small_machine(16, 16, 32));
  for (Step& step : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) g->tiles.back().wait.reset();
  ValidationReport report = validate_plan(plan);
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.summary().find("A_gathered"), std::string::npos) << report.summary();
  // ReduceScatter: a reduction that no longer waits for a peer's partial tiles.
  const Problem rs{OpKind::gemm_rs, 2 * 64, 32, 16, 2, DType::bf16, DType::bf16, {}};
  plan = plan_tilelink(rs, small_machine(16, 16, 32));
  for (Step& step : plan.ranks[1].steps)
    if (std::holds_alternative<ReduceStep>(step.body) && std::get<ReduceStep>(step.body).srcs[0].rank == 0) {
      step.waits.clear();
      break;
    }
  report = validate_plan(plan);
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.summary().find("partial@0"), std::string::npos) << report.summary();
}

TEST(TileLinkPlans, ACompanionIsOneLaunchOfCopiesAndReductionsOnOneStream) {
  const Problem p{OpKind::ag_gemm, 64, 32, 16, 2, DType::bf16, DType::bf16, {}};
  const Plan good = plan_tilelink(p, small_machine(16, 16, 32));
  Plan moved = good;  // a companion step on another stream
  for (Step& step : moved.ranks[0].steps)
    if (step.companion >= 0) {
      step.stream = 0;
      break;
    }
  EXPECT_NE(validate_plan(moved).summary().find("companion #0"), std::string::npos) << validate_plan(moved).summary();
  Plan gemm_in = good;  // a GEMM in the group
  for (Step& step : gemm_in.ranks[0].steps)
    if (std::holds_alternative<GemmStep>(step.body)) step.companion = 0;
  EXPECT_NE(validate_plan(gemm_in).summary().find("not a copy, a reduction or a join on SMs"), std::string::npos);
  Plan split = good;  // another step of the stream between two of the group's
  Step intruder;
  intruder.label = "intruder";
  intruder.stream = 1;
  intruder.body = JoinStep{};
  split.ranks[0].steps.insert(split.ranks[0].steps.begin() + 2, intruder);
  EXPECT_NE(validate_plan(split).summary().find("comes between"), std::string::npos) << validate_plan(split).summary();
}

TEST(TileLinkPlans, TheSimulatorPredictsThemAndMoreCommSmsSlowTheGemm) {
  PlanOptions o;
  o.machine = MachineProfile{};
  const Problem p{OpKind::ag_gemm, 4096, 8192, 4096, 4, DType::bf16, DType::bf16, {}};
  o.tilelink.comm_sms = 8;
  const double few = simulate(make_plan(find_strategy("tilelink"), p, o), o.machine).seconds;
  o.tilelink.comm_sms = 66;
  const double half = simulate(make_plan(find_strategy("tilelink"), p, o), o.machine).seconds;
  EXPECT_GT(few, 0);
  EXPECT_GT(half, few) << "half the SMs for a GEMM-bound shape";
  const Problem rs{OpKind::gemm_rs, 8192, 4096, 4096, 4, DType::bf16, DType::bf16, {}};
  EXPECT_GT(simulate(make_plan(find_strategy("tilelink"), rs, {}), o.machine).seconds, 0);
}


Problem moe(OpKind op, int world, int64_t tokens, int experts, int topk, uint64_t seed, double skew) {
  Problem p{op, tokens, 24, 16, world, DType::bf16, DType::bf16, {}};
  p.experts = experts;
  p.topk = topk;
  p.choices = random_choices(world, tokens, experts, topk, seed, skew);
  return p;
}

TEST(MoeProblems, RowsAreGroupedBySourceThenExpertAndEveryChoiceHasOne) {
  const Problem p = moe(OpKind::ag_moe, 3, 10, 4, 2, 5, 0.0);
  const MoeRows rows = moe_rows(p);
  EXPECT_EQ(rows.rows(), 3 * 10 * 2);
  int64_t next = 0;
  for (int s = 0; s < 3; ++s)
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(rows.block_first(s, e), next);
      for (int64_t row = next; row < next + rows.block_rows(s, e); ++row) {
        const int64_t t = rows.token[static_cast<size_t>(row)];
        EXPECT_EQ(t / 10, s) << "a block holds its source's tokens only";
        bool found = false;
        for (int j = 0; j < 2; ++j)
          if (rows.row_of[static_cast<size_t>(t * 2 + j)] == row) found = p.choices[static_cast<size_t>(s)][static_cast<size_t>((t % 10) * 2 + j)] == e;
        EXPECT_TRUE(found) << "row " << row << " is a choice of expert " << e;
      }
      next += rows.block_rows(s, e);
    }
  for (int64_t v : rows.row_of) EXPECT_GE(v, 0);
}

TEST(MoeProblems, SkewedChoicesLeaveExpertsEmptyAndOneOverfull) {
  const Problem p = moe(OpKind::ag_moe, 2, 200, 8, 2, 9, 0.8);
  const MoeRows rows = moe_rows(p);
  for (int s = 0; s < 2; ++s) {
    for (int e = 4; e < 8; ++e) EXPECT_EQ(rows.block_rows(s, e), 0) << "expert " << e;
    for (int e = 1; e < 4; ++e) EXPECT_GT(rows.block_rows(s, 0), rows.block_rows(s, e)) << "expert 0 is overfull";
  }
}

TEST(MoeProblems, BadChoicesAreRejectedWithTheirReason) {
  Problem p = moe(OpKind::moe_rs, 2, 4, 3, 2, 1, 0.0);
  p.choices[1][3] = p.choices[1][2];  // token 1 picks one expert twice
  EXPECT_THROW(check_problem(p), std::invalid_argument);
  p = moe(OpKind::ag_moe, 2, 4, 3, 2, 1, 0.0);
  p.choices[0][0] = 3;
  EXPECT_THROW(check_problem(p), std::invalid_argument);
  p = moe(OpKind::ag_moe, 2, 4, 3, 2, 1, 0.0);
  p.topk = 4;
  EXPECT_THROW(check_problem(p), std::invalid_argument);
  p = moe(OpKind::ag_moe, 2, 4, 3, 2, 1, 0.0);
  p.choices.pop_back();
  EXPECT_THROW(check_problem(p), std::invalid_argument);
  Problem plain{OpKind::ag_gemm, 4, 8, 8, 2, DType::bf16, DType::bf16, {}};
  plain.experts = 2;
  EXPECT_THROW(check_problem(plain), std::invalid_argument);
}

TEST(TileLinkPlans, MoeBothHalvesAreProvedWithEmptyAndOverfullExperts) {
  for (int world : {1, 2, 3, 4, 8})
    for (double skew : {0.0, 0.9})
      for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs}) {
        const Problem p = moe(op, world, 13, 6, 2, static_cast<uint64_t>(world) * 31, skew);
        SCOPED_TRACE(describe(p) + " skew " + std::to_string(skew));
        for (const char* name : {"tilelink", "sequential"}) {
          const CpuProof proof = prove_on_cpu(find_strategy(name).build(p, small_machine(16, 16, 5)), 11);
          EXPECT_TRUE(proof.passed()) << name << ": " << proof.explain();
        }
      }
}

// sequential's MoE runs one GEMM per expert over every rank's rows (expert-major), not one per
// (source, expert): at world 4 with 6 experts, 6 GEMMs per rank, each over all its expert's rows.
TEST(TileLinkPlans, SequentialMoeRunsOneGemmPerExpertOverEveryRanksRows) {
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs}) {
    const Problem p = moe(op, 4, 13, 6, 2, 7, 0.0);
    SCOPED_TRACE(describe(p));
    const MoeRows rows = moe_rows(p);
    const Plan plan = plan_sequential(p, small_machine(16, 16, 5));
    for (const RankPlan& rp : plan.ranks) {
      std::vector<int64_t> gemm_rows;
      for (const Step& step : rp.steps)
        if (const auto* gemm = std::get_if<GemmStep>(&step.body)) gemm_rows.push_back(gemm->a.box.rows);
      std::vector<int64_t> per_expert;
      for (int e = 0; e < p.experts; ++e) {
        int64_t count = 0;
        for (int s = 0; s < p.world_size; ++s) count += rows.block_rows(s, e);
        if (count > 0) per_expert.push_back(count);
      }
      EXPECT_EQ(gemm_rows, per_expert) << "rank " << rp.rank;
    }
  }
}

// The grouped-GEMM MoE plans' setting: 70 tokens per rank, 5 experts, top-2, N = 192 (one 192-wide
// tile per expert's rows), small tiles elsewhere, the grouped GEMM on.
Problem grouped_moe(OpKind op, int world, uint64_t seed, double skew) {
  Problem p = moe(op, world, 70, 5, 2, seed, skew);
  p.n = 192;
  return p;
}

PlanOptions grouped_moe_options() {
  PlanOptions o = small_machine(16, 16, 5);
  o.moe_grouped_gemm = true;
  return o;
}

TEST(TileLinkPlans, SequentialMoeWithTheGroupedGemmRunsEveryExpertInOneGemmAndProves) {
  // PlanOptions::moe_grouped_gemm: each expert's rows start on the 128-row tile grid of the padded
  // expert-major buffer, one GEMM's tiles are each expert's rows against its own N rows of B, and the
  // plan computes the op (worlds 1-3, uniform and skewed routing with empty and overfull experts).
  for (OpKind op : {OpKind::ag_moe, OpKind::moe_rs})
    for (int world : {1, 2, 3})
      for (double skew : {0.0, 0.9}) {
        const Problem p = grouped_moe(op, world, 3 + static_cast<uint64_t>(world), skew);
        SCOPED_TRACE(describe(p) + " skew " + std::to_string(skew));
        const PlanOptions o = grouped_moe_options();
        const Plan plan = plan_sequential(p, o);
        ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
        const MoeRows rows = moe_rows(p);
        for (const RankPlan& rp : plan.ranks) {
          std::vector<const GemmStep*> gemms;
          for (const Step& step : rp.steps)
            if (const auto* g = std::get_if<GemmStep>(&step.body)) gemms.push_back(g);
          ASSERT_EQ(gemms.size(), 1u) << "rank " << rp.rank;
          const GemmStep& g = *gemms[0];
          EXPECT_EQ(g.tile_m, 128);
          EXPECT_EQ(g.tile_n, 192);
          EXPECT_EQ(g.b.box.rows, p.experts * p.n) << "every expert's rows of B";
          int64_t stored = 0;
          for (const GemmTile& t : g.tiles) {
            EXPECT_EQ(t.tile.row % 128, 0);
            EXPECT_EQ(t.tile.col % 192, 0);
            EXPECT_EQ(t.store.box.row, t.tile.row);
            EXPECT_EQ(t.store.box.col, t.tile.col % p.n);
            stored += t.tile.rows * t.tile.cols;
          }
          EXPECT_EQ(stored, rows.rows() * p.n) << "every row of every expert stored once";
        }
        const CpuProof proof = prove_on_cpu(plan, 5);
        EXPECT_TRUE(proof.passed()) << proof.explain();
      }
  // Every token to one expert (top-1): the grouped table would be a shifted plain table that the
  // executors run as a library GEMM over the wrong box; the one expert's GEMM is that GEMM already,
  // and the plan still proves. Its buffers keep the routing-independent padded size.
  Problem one = moe(OpKind::ag_moe, 2, 40, 4, 1, 3, 0.0);
  one.n = 192;
  one.choices.assign(2, std::vector<int>(40, 2));
  PlanOptions grouped = small_machine(16, 16, 5);
  grouped.moe_grouped_gemm = true;
  const Plan single = plan_sequential(one, grouped);
  for (const Step& step : single.ranks[0].steps)
    if (const auto* g = std::get_if<GemmStep>(&step.body)) {
      EXPECT_EQ(g->b.box.rows, one.n) << "the expert's own rows of B";
      EXPECT_TRUE(is_plain_tile_table(*g));
    }
  EXPECT_TRUE(prove_on_cpu(single, 3).passed()) << prove_on_cpu(single, 3).explain();
  // No tile width divides N = 100 (nor FP8): one GEMM per expert, as without the option.
  Problem ragged = moe(OpKind::ag_moe, 2, 20, 4, 2, 7, 0.0);
  ragged.n = 100;
  PlanOptions o = small_machine(16, 16, 5);
  o.moe_grouped_gemm = true;
  int gemms = 0;
  const Plan per_expert = plan_sequential(ragged, o);  // kept: a range-for over a temporary's member would read freed memory
  for (const Step& step : per_expert.ranks[0].steps) gemms += std::holds_alternative<GemmStep>(step.body);
  EXPECT_GT(gemms, 1);
}

TEST(TileLinkPlans, DecomposedMoeRunsEachSourcesExpertsInOneGemmAsItsTokensArrive) {
  // decomposed ag_moe: a copy-engine pull per peer, then per source (the own first, then ring order)
  // a gather that waits for that source's tokens and one grouped GEMM over the source's experts,
  // each expert's rows on the tile grid of the source's own region of X, stored straight into the
  // source's rows of C. Worlds 1-4, uniform and skewed routing with empty and overfull experts.
  for (int world : {1, 2, 3, 4})
    for (double skew : {0.0, 0.9}) {
      const Problem p = grouped_moe(OpKind::ag_moe, world, 11 + static_cast<uint64_t>(world), skew);
      SCOPED_TRACE(describe(p) + " skew " + std::to_string(skew));
      const PlanOptions o = grouped_moe_options();
      const Plan plan = plan_decomposed(p, o);
      ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
      const MoeRows rows = moe_rows(p);
      const int64_t region = (p.m * p.topk + p.experts * 127 + 127) / 128 * 128;  // a source's rows with every expert's padding
      for (const RankPlan& rp : plan.ranks) {
        int pulls = 0, gathers = 0, gemms = 0;
        std::vector<int> sources;  // of the gathers, in program order
        int64_t stored = 0;
        for (const Step& step : rp.steps) {
          if (std::holds_alternative<CopyStep>(step.body)) {
            ++pulls;
            EXPECT_EQ(step.engine, Engine::copy_engine);
            EXPECT_EQ(step.stream, 1);
          }
          if (const auto* g = std::get_if<PermuteRowsStep>(&step.body)) {
            const int s = static_cast<int>(g->dst.box.row / region);
            sources.push_back(s);
            EXPECT_EQ(step.waits.size(), s == rp.rank ? 0u : 1u) << "a peer's rows wait for its tokens";
            ++gathers;
          }
          if (const auto* g = std::get_if<GemmStep>(&step.body)) {
            ++gemms;
            ASSERT_FALSE(sources.empty()) << "a GEMM after its source's gather";
            const int s = sources.back();
            EXPECT_EQ(g->tile_m, 128);
            EXPECT_EQ(g->tile_n, 192);
            for (const GemmTile& t : g->tiles) {
              EXPECT_EQ(t.tile.row % 128, 0) << "each expert's rows start on the tile grid";
              EXPECT_GE(t.tile.row, s * region);
              EXPECT_LT(t.tile.row, (s + 1) * region) << "source " << s << "'s own region of X";
              EXPECT_GE(t.store.box.row, rows.source_first(s));
              EXPECT_LE(t.store.box.row + t.store.box.rows, rows.source_first(s) + rows.source_rows(s)) << "into the source's rows of C";
              stored += t.tile.rows * t.tile.cols;
            }
          }
        }
        EXPECT_EQ(pulls, world - 1);
        EXPECT_EQ(gathers, world);
        EXPECT_EQ(gemms, world) << "one grouped GEMM per source";
        ASSERT_EQ(sources.size(), static_cast<size_t>(world));
        for (int i = 0; i < world; ++i) EXPECT_EQ(sources[static_cast<size_t>(i)], (rp.rank + i) % world) << "the own rows first, then ring order";
        EXPECT_EQ(stored, rows.rows() * p.n) << "every row of every expert stored once";
      }
      const CpuProof proof = prove_on_cpu(plan, 5);
      EXPECT_TRUE(proof.passed()) << proof.explain();
    }
  // Without a tile width that divides N: a library GEMM per (source, expert) the source picked.
  Problem ragged = moe(OpKind::ag_moe, 2, 20, 4, 2, 7, 0.0);
  ragged.n = 100;
  PlanOptions o = small_machine(16, 16, 5);
  o.moe_grouped_gemm = true;
  const Plan per_expert = plan_decomposed(ragged, o);
  EXPECT_TRUE(prove_on_cpu(per_expert, 3).passed()) << prove_on_cpu(per_expert, 3).explain();
  EXPECT_TRUE(prove_on_cpu(plan_decomposed(moe(OpKind::moe_rs, 2, 20, 4, 2, 7, 0.0), o), 3).passed());
}

TEST(TileLinkPlans, DecomposedMoeReduceScatterPushesEachSourcesTokensAsTheirBlockIsReduced) {
  // decomposed moe_rs: per source block (ring order after the own, the own last) a gather of A's
  // rows by expert onto the tile grid, one grouped GEMM into the block's rows of P, the top-k
  // reduction of the block, and for a peer's block a copy-engine push into its receive slot; the
  // sum of the slots waits for every peer. Worlds 1-4, uniform and skewed routing.
  for (int world : {1, 2, 3, 4})
    for (double skew : {0.0, 0.9}) {
      const Problem p = grouped_moe(OpKind::moe_rs, world, 17 + static_cast<uint64_t>(world), skew);
      SCOPED_TRACE(describe(p) + " skew " + std::to_string(skew));
      const PlanOptions o = grouped_moe_options();
      const Plan plan = plan_decomposed(p, o);
      ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
      for (const RankPlan& rp : plan.ranks) {
        int pushes = 0, gemms = 0, reduces = 0;
        for (const Step& step : rp.steps) {
          if (std::holds_alternative<CopyStep>(step.body)) {
            ++pushes;
            EXPECT_EQ(step.engine, Engine::copy_engine);
            EXPECT_EQ(step.waits.size(), 1u) << "a push waits for its block's reduction";
          }
          if (const auto* g = std::get_if<GemmStep>(&step.body)) {
            ++gemms;
            EXPECT_EQ(g->tile_m, 128);
            for (const GemmTile& t : g->tiles) EXPECT_EQ(t.tile.row % 128, 0);
          }
          if (std::holds_alternative<ReduceStep>(step.body)) {
            ++reduces;
            EXPECT_EQ(step.waits.size(), static_cast<size_t>(world - 1)) << "the sum waits for every peer's slot";
          }
        }
        EXPECT_EQ(pushes, world - 1);
        EXPECT_EQ(gemms, world) << "one grouped GEMM per source block";
        EXPECT_EQ(reduces, 1);
      }
      const CpuProof proof = prove_on_cpu(plan, 5);
      EXPECT_TRUE(proof.passed()) << proof.explain();
    }
}

TEST(TileLinkPlans, MoeGathersASourceOnlyOnceItsTokensAreInAndAMissingWaitIsCaught) {
  const Problem p = moe(OpKind::ag_moe, 3, 20, 4, 2, 3, 0.0);
  Plan plan = plan_tilelink(p, small_machine(16, 16, 8));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  // Rank 0: its own tokens first (3 tiles of 8, 8, 4 rows), then rank 1's, then rank 2's.
  std::vector<uint64_t> gather_waits;
  for (const Step& step : plan.ranks[0].steps)
    if (std::holds_alternative<PermuteRowsStep>(step.body)) gather_waits.push_back(step.waits.at(0).value);
  EXPECT_EQ(gather_waits, (std::vector<uint64_t>{3, 6, 9}));
  for (Step& step : plan.ranks[0].steps)
    if (std::holds_alternative<PermuteRowsStep>(step.body) && step.waits.at(0).value == 9) step.waits.clear();
  const ValidationReport report = validate_plan(plan);
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.summary().find("A_gathered"), std::string::npos) << report.summary();
  // moe_rs: a reduction that no longer waits for rank 2's block.
  Plan rs = plan_tilelink(moe(OpKind::moe_rs, 3, 20, 4, 2, 3, 0.0), small_machine(16, 16, 8));
  for (Step& step : rs.ranks[0].steps)
    if (const auto* sum = std::get_if<ReduceStep>(&step.body); sum && sum->srcs[0].rank == 2) step.waits.clear();
  EXPECT_NE(validate_plan(rs).summary().find("Z@2"), std::string::npos) << validate_plan(rs).summary();
}

}  // namespace
}  // namespace weft
