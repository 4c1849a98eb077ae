// `fused` (Flux): one GEMM per rank; AllGather tiles wait for exactly the copies that bring their
// rows, in arrival order; ReduceScatter tiles land in their rank's slot on that rank, starting with
// the next rank, and the own tiles add the slots in their epilogue; tile rows shared by two ranks go
// through local storage, copy-engine pushes and a reduction pass.
#include <gtest/gtest.h>

#include <set>

#include "../support/plan_options.hpp"
#include "weft/reference/cpu_proof.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"

namespace weft {
namespace {

std::vector<const GemmStep*> gemms_of(const RankPlan& rank) {
  std::vector<const GemmStep*> gemms;
  for (const Step& step : rank.steps)
    if (const auto* g = std::get_if<GemmStep>(&step.body)) gemms.push_back(g);
  return gemms;
}

TEST(FusedPlans, AllGatherTilesWaitForTheCopiesThatBringTheirRows) {
  // 4 ranks of 200 rows (ragged against 64-row tiles: some tiles hold rows of two shards), 3 chunks.
  Problem p{OpKind::ag_gemm, 200, 96, 32, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o = testing_support::tiled(64, 32, Raster::along_m, 2);
  o.comm_chunks = 3;
  const Plan plan = plan_fused(p, o);
  const auto cuts = std::vector<int64_t>{0, 66, 133, 200};  // split_rows(200, 3)
  for (const RankPlan& rank : plan.ranks) {
    const int r = rank.rank;
    // The own shard is copied into place on the GEMM's stream, before the GEMM (a copy within one GPU
    // is a kernel: it would find no SM while the GEMM waits). Stream 1 pulls every peer's chunks in
    // ring order; pull i raises the counter to i + 1.
    std::vector<std::pair<int64_t, int64_t>> arrival;  // gathered rows of pull i
    for (const Step& step : rank.steps)
      if (const auto* copy = std::get_if<CopyStep>(&step.body)) {
        if (copy->src.rank == r) {
          EXPECT_EQ(step.stream, 0);
          EXPECT_EQ(copy->dst.box.row, r * 200);
          continue;
        }
        EXPECT_EQ(step.stream, 1);
        arrival.push_back({copy->dst.box.row, copy->dst.box.rows});
      }
    ASSERT_EQ(arrival.size(), 3u * 3u);
    EXPECT_EQ(arrival[0], (std::pair<int64_t, int64_t>{((r + 1) % 4) * 200, 66}));
    EXPECT_EQ(arrival[8].first, ((r + 3) % 4) * 200 + cuts[2]);
    const auto gemms = gemms_of(rank);
    ASSERT_EQ(gemms.size(), 1u) << "Flux never splits the GEMM";
    const GemmStep& g = *gemms[0];
    EXPECT_EQ(g.tiles.size(), static_cast<size_t>(((800 + 63) / 64) * 3));
    uint64_t previous = 0;
    for (const GemmTile& t : g.tiles) {
      // The wait is the last pull holding one of the tile's rows; none for the own rows.
      uint64_t want = 0;
      for (size_t i = 0; i < arrival.size(); ++i)
        if (arrival[i].first < t.tile.row_end() && t.tile.row < arrival[i].first + arrival[i].second) want = i + 1;
      const uint64_t wait = t.wait ? t.wait->value : 0;
      EXPECT_EQ(wait, want) << "tile at row " << t.tile.row;
      EXPECT_EQ(t.wait.has_value(), want > 0);
      EXPECT_GE(wait, previous) << "tiles run in the arrival order of their rows";
      previous = wait;
      EXPECT_EQ(t.store.box.row, t.tile.row);
      EXPECT_FALSE(t.notify.has_value());
    }
    EXPECT_FALSE(g.tiles.front().wait.has_value()) << "the local shard's tiles first";
    EXPECT_EQ(g.tiles.front().tile.row, (r * 200 + 63) / 64 * 64) << "the first tile holding only local rows";
  }
  const CpuProof proof = prove_on_cpu(plan, 3);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(FusedPlans, AllGatherOwnTilesReadTheirRowsInPlaceWhereTilesHoldOneShard) {
  // 3 ranks of 128 rows, 64-row tiles: no copy of the own shard; its tiles read the op's input.
  Problem p{OpKind::ag_gemm, 128, 96, 32, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_fused(p, testing_support::tiled(64, 32, Raster::along_m, 2));
  for (const RankPlan& rank : plan.ranks) {
    const int r = rank.rank;
    const BufferId a = find_buffer(rank, "A");
    for (const Step& step : rank.steps) {
      if (const auto* copy = std::get_if<CopyStep>(&step.body)) {
        EXPECT_NE(copy->src.rank, r) << "only pulls of peers' shards";
      }
    }
    const GemmStep& g = *gemms_of(rank)[0];
    size_t in_place = 0;
    for (const GemmTile& t : g.tiles) {
      const bool own = t.tile.row / 128 == r;
      EXPECT_EQ(t.a_rows.has_value(), own) << "tile at row " << t.tile.row;
      EXPECT_EQ(t.wait.has_value(), !own);
      if (!own) continue;
      ++in_place;
      EXPECT_EQ(t.a_rows->rank, r);
      EXPECT_EQ(t.a_rows->buffer, a);
      EXPECT_EQ(t.a_rows->box, (Rect{t.tile.row - r * 128, 0, t.tile.rows, 32}));
    }
    EXPECT_EQ(in_place, 2u * 3u);
    EXPECT_TRUE(g.tiles.front().a_rows.has_value()) << "the own shard's tiles first";
  }
  const CpuProof proof = prove_on_cpu(plan, 3);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(FusedPlans, AllGatherTileWithoutItsWaitIsARace) {
  Problem p{OpKind::ag_gemm, 128, 64, 32, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_fused(p, testing_support::tiled(64, 64, Raster::along_m, 1));
  ASSERT_TRUE(validate_plan(plan).ok());
  for (Step& step : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) g->tiles.back().wait.reset();  // a peer's tile
  EXPECT_FALSE(validate_plan(plan).ok());
}

TEST(FusedPlans, ReduceScatterAddsThePeersPartialSumsInTheOwnTilesEpilogue) {
  // 3 ranks x 128 rows, 64-row tiles: every tile belongs to one rank.
  Problem p{OpKind::gemm_rs, 384, 80, 32, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_fused(p, testing_support::tiled(64, 32, Raster::along_m, 1));
  for (const RankPlan& rank : plan.ranks) {
    const int r = rank.rank;
    const auto gemms = gemms_of(rank);
    ASSERT_EQ(gemms.size(), 1u);
    ASSERT_EQ(rank.steps.size(), 1u) << "no reduction pass and nothing to push: the GEMM is the whole plan";
    const GemmStep& g = *gemms[0];
    EXPECT_EQ(g.tiles.front().store.rank, (r + 1) % 3) << "the next rank's rows first";
    const BufferId received = find_buffer(rank, "received"), c = find_buffer(rank, "C");
    EXPECT_EQ(rank.buffers[static_cast<size_t>(received)].rows, 2 * 128) << "a slot for each peer";
    const uint64_t own_tiles = 2 * 3;  // 128 rows x 80 columns in 64x32 tiles
    bool own_part = false;
    for (const GemmTile& t : g.tiles) {
      const int d = static_cast<int>(t.tile.row / 128);
      if (d != r) {
        EXPECT_FALSE(own_part) << "the own rows last";
        EXPECT_EQ(t.store.rank, d);
        EXPECT_EQ(t.store.buffer, received);
        EXPECT_EQ(t.store.box.row, ((r - d - 1 + 3) % 3) * 128 + t.tile.row - d * 128) << "slot (r - d - 1) mod W of rank d";
        ASSERT_TRUE(t.notify.has_value());
        EXPECT_EQ(t.notify->signal.rank, d);
        EXPECT_TRUE(t.addends.empty());
        continue;
      }
      own_part = true;
      EXPECT_EQ(t.store.rank, r);
      EXPECT_EQ(t.store.buffer, c);
      EXPECT_EQ(t.store.box.row, t.tile.row - r * 128);
      EXPECT_FALSE(t.notify.has_value());
      ASSERT_TRUE(t.wait.has_value());
      EXPECT_EQ(t.wait->value, 2 * own_tiles) << "every peer's tiles of these rows";
      ASSERT_EQ(t.addends.size(), 2u);
      for (int j = 0; j < 2; ++j) {
        EXPECT_EQ(t.addends[static_cast<size_t>(j)].buffer, received);
        EXPECT_EQ(t.addends[static_cast<size_t>(j)].box.row, j * 128 + t.tile.row - r * 128);
        EXPECT_EQ(t.addends[static_cast<size_t>(j)].box.col, t.tile.col);
      }
    }
    EXPECT_TRUE(own_part);
  }
  const CpuProof proof = prove_on_cpu(plan, 4);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(FusedPlans, ReduceScatterOwnTileWithoutItsWaitIsARace) {
  Problem p{OpKind::gemm_rs, 256, 64, 32, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_fused(p, testing_support::tiled(64, 64, Raster::along_m, 1));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  for (Step& step : plan.ranks[0].steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) g->tiles.back().wait.reset();  // an own tile: it reads the slots
  EXPECT_FALSE(validate_plan(plan).ok());
}

TEST(FusedPlans, AWaitInTheEpilogueDoesNotOrderTheTilesLoads) {
  // An all-gather tile whose wait guards its A rows: given an addend, it would wait only in its
  // epilogue, after loading the rows its wait was for. The ordering check must see the race.
  Problem p{OpKind::ag_gemm, 128, 64, 32, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_fused(p, testing_support::tiled(64, 32, Raster::along_m, 1));
  ASSERT_TRUE(validate_plan(plan).ok());
  RankPlan& rank = plan.ranks[0];
  for (Step& step : rank.steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) {
      GemmTile& peer_tile = g->tiles.back();
      ASSERT_TRUE(peer_tile.wait.has_value());
      Region addend = peer_tile.store;  // a local box of the tile's size that nothing writes during the call
      addend.buffer = find_buffer(rank, "B");
      addend.box = Rect{0, 0, peer_tile.tile.rows, peer_tile.tile.cols};
      peer_tile.addends.push_back(addend);
    }
  const ValidationReport report = validate_plan(plan);
  EXPECT_TRUE(report.has("ordering")) << report.summary();
}

TEST(FusedPlans, ReduceScatterPushesTheRowsOfTilesThatTwoRanksShare) {
  // 96 rows per rank against 64-row tiles (rows 64..127 and 256..319 are shared), and 20 rows per
  // rank, where every tile row is shared; both ragged in N.
  for (int64_t share : {96, 20}) {
    const int world = 5;
    Problem p{OpKind::gemm_rs, share * world, 72, 24, world, DType::bf16, DType::bf16, {}};
    const Plan plan = plan_fused(p, testing_support::tiled(64, 32, Raster::along_m, 1));
    for (const RankPlan& rank : plan.ranks) {
      const GemmStep& g = *gemms_of(rank)[0];
      std::set<int64_t> pushed_rows;
      for (const Step& step : rank.steps)
        if (const auto* copy = std::get_if<CopyStep>(&step.body))
          for (int64_t i = 0; i < copy->dst.box.rows; ++i) pushed_rows.insert(copy->dst.rank * share + copy->dst.box.row - rank.rank * share + i);
      bool shared_part = true;
      int64_t stored_directly = 0;
      for (const GemmTile& t : g.tiles) {
        const bool shared = t.tile.row / share != (t.tile.row_end() - 1) / share;
        if (!shared) shared_part = false;
        EXPECT_FALSE(shared && !shared_part) << "tiles of shared rows run first";
        if (shared) {
          EXPECT_EQ(t.store.rank, rank.rank);
          EXPECT_GE(t.store.box.row, p.m) << "stored behind the slots";
          for (int64_t row = t.tile.row; row < t.tile.row_end(); ++row) EXPECT_TRUE(pushed_rows.count(row)) << row;
        } else {
          ++stored_directly;
          for (int64_t row = t.tile.row; row < t.tile.row_end(); ++row) EXPECT_FALSE(pushed_rows.count(row)) << row;
        }
      }
      if (share == 20) {
        EXPECT_EQ(stored_directly, 0);
      }
    }
    const CpuProof proof = prove_on_cpu(plan, 5);
    EXPECT_TRUE(proof.passed()) << "share " << share << ": " << proof.explain();
  }
}

TEST(FusedPlans, OnlyForAllGatherAndReduceScatter) {
  for (OpKind op : {OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm}) {
    Problem p{op, 64, 64, 64, 2, DType::bf16, DType::bf16, {}};
    if (op != OpKind::gemm_ar) p.routing = {std::vector<int>(64, 0), std::vector<int>(64, 1)};
    EXPECT_THROW(plan_fused(p, {}), std::invalid_argument) << to_string(op);
  }
  PlanOptions negative;
  negative.comm_chunks = -1;
  EXPECT_THROW(plan_fused(Problem{OpKind::ag_gemm, 64, 64, 64, 2, DType::bf16, DType::bf16, {}}, negative), std::invalid_argument);
}

}  // namespace
}  // namespace weft
