// `chunked` (AutoOverlap): every schedule template, on every backend, at world 1-8 with ragged
// shapes, validated and proved by the reference executor; a user's JSON schedule; schedules the
// checks reject (a dependency cycle, rows that never arrive or arrive twice, collectives out of
// order); a hand-broken plan; and the tile order following chunk arrival.
#include <gtest/gtest.h>

#include <random>

#include "../support/plan_options.hpp"
#include "weft/plan/chunked.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft {
namespace {

struct Template {
  OpKind op;
  ScheduleShape shape;
};

const Template kTemplates[] = {{OpKind::ag_gemm, ScheduleShape::swizzle}, {OpKind::ag_gemm, ScheduleShape::ring},
                               {OpKind::ag_gemm, ScheduleShape::mesh_2d}, {OpKind::gemm_rs, ScheduleShape::swizzle},
                               {OpKind::gemm_rs, ScheduleShape::pull},    {OpKind::gemm_ar, ScheduleShape::partition}};

PlanOptions small_tiles(ScheduleShape shape, int chunks, ChunkBackend backend) {
  PlanOptions o = testing_support::tiled(8, 8, Raster::along_m, 2);
  o.chunked.shape = shape;
  o.chunked.chunks = chunks;
  o.chunked.backend = backend;
  return o;
}

TEST(ChunkedPlans, EveryTemplateAndBackendIsProvedAtWorldsOneToEight) {
  std::mt19937 random(7);
  int proved = 0;
  for (const Template& t : kTemplates)
    for (int world = 1; world <= 8; ++world)
      for (ChunkBackend backend : {ChunkBackend::copy_engine, ChunkBackend::sm}) {
        if (t.op == OpKind::gemm_ar && backend != ChunkBackend::copy_engine) continue;  // NCCL chunks only
        const ChunkBackend used = t.op == OpKind::gemm_ar ? ChunkBackend::nccl : backend;
        // Ragged against the 8-row tiles; gemm_rs needs M a multiple of W.
        const int64_t m = t.op == OpKind::gemm_rs ? world * (3 + static_cast<int64_t>(random() % 9)) : 5 + static_cast<int64_t>(random() % 20);
        const Problem p{t.op, m, 8 + 4 * static_cast<int64_t>(random() % 5), 8 + 8 * static_cast<int64_t>(random() % 3), world,
                        DType::bf16, DType::bf16, {}};
        for (int chunks : {1, 3}) {
          PlanOptions o = small_tiles(t.shape, chunks, used);
          if (t.shape == ScheduleShape::mesh_2d && world == 6) o.chunked.group_size = 3;
          const Plan plan = plan_chunked(p, o);
          const CpuProof proof = prove_on_cpu(plan, static_cast<uint64_t>(world * 10 + chunks));
          EXPECT_TRUE(proof.passed()) << to_string(t.shape) << " " << describe(p) << " chunks " << chunks << " "
                                      << to_string(used) << ": " << proof.explain();
          ++proved;
        }
      }
  EXPECT_GE(proved, 150);
}

TEST(ChunkedPlans, AUsersJsonScheduleIsReadCheckedAndProved) {
  // World 3, a ring by hand: rank r pulls shard r+1 from r+1, then shard r+2 from r+1 once r+1 has it.
  const Problem p{OpKind::ag_gemm, 16, 24, 16, 3, DType::bf16, DType::bf16, {}};
  std::string text = R"({"name": "hand ring", "op": "ag_gemm", "ranks": [)";
  for (int r = 0; r < 3; ++r) {
    const int next = (r + 1) % 3, after = (r + 2) % 3;
    text += std::string(r ? "," : "") + "[{\"kind\": \"pull\", \"peer\": " + std::to_string(next) + ", \"rows\": [" + std::to_string(next * 16) +
            ", " + std::to_string(next * 16 + 16) + "]}, {\"kind\": \"pull\", \"peer\": " + std::to_string(next) + ", \"rows\": [" +
            std::to_string(after * 16) + ", " + std::to_string(after * 16 + 16) + "], \"backend\": \"sm\", \"after\": [[" + std::to_string(next) +
            ", 0]]}]";
  }
  text += "]}";
  const Schedule s = parse_schedule_json(text);
  EXPECT_EQ(s.name, "hand ring");
  EXPECT_EQ(parse_schedule_json(schedule_json(s)), s) << "JSON round trip";
  PlanOptions o = testing_support::tiled(8, 8, Raster::along_m, 1);
  o.chunked.schedule = s;
  const CpuProof proof = prove_on_cpu(plan_chunked(p, o), 3);
  EXPECT_TRUE(proof.passed()) << proof.explain();
  // Every template survives the same round trip.
  for (const Template& t : kTemplates) {
    const Problem q{t.op, t.op == OpKind::gemm_rs ? 24 : 12, 16, 16, 4, DType::bf16, DType::bf16, {}};
    const Schedule made = make_schedule(q, small_tiles(t.shape, 2, t.op == OpKind::gemm_ar ? ChunkBackend::nccl : ChunkBackend::copy_engine).chunked);
    EXPECT_EQ(parse_schedule_json(schedule_json(made)), made) << to_string(t.shape);
  }
}

std::string rejection(const Problem& p, const Schedule& s) {
  try {
    check_schedule(p, s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ChunkedPlans, ASchedulesFaultsAreNamed) {
  const Problem p{OpKind::ag_gemm, 16, 24, 16, 2, DType::bf16, DType::bf16, {}};
  ChunkedOptions o;
  o.shape = ScheduleShape::swizzle;
  o.chunks = 2;
  const Schedule good = make_schedule(p, o);
  ASSERT_EQ(rejection(p, good), "");

  // A cycle: rank 0's first pull waits for rank 1's second, which waits for rank 0's first.
  Schedule cycle = good;
  cycle.ranks[0][0].after.push_back({1, 1});
  cycle.ranks[1][1].after.push_back({0, 0});
  const std::string why = rejection(p, cycle);
  EXPECT_NE(why.find("dependency cycle"), std::string::npos) << why;
  EXPECT_NE(why.find("op 0 of rank 0 (pull rows 16..24 from rank 1)"), std::string::npos) << why;
  EXPECT_NE(why.find("of rank 1"), std::string::npos) << why;

  Schedule missing = good;
  missing.ranks[1].pop_back();
  EXPECT_NE(rejection(p, missing).find("never arrive"), std::string::npos) << rejection(p, missing);
  Schedule twice = good;
  twice.ranks[1].push_back(twice.ranks[1].front());
  EXPECT_NE(rejection(p, twice).find("arrive twice"), std::string::npos) << rejection(p, twice);
  Schedule self = good;
  self.ranks[0][0].peer = 0;
  EXPECT_NE(rejection(p, self).find("another rank"), std::string::npos);
  Schedule dangling = good;
  dangling.ranks[0][0].after.push_back({1, 7});
  EXPECT_NE(rejection(p, dangling).find("no such operation"), std::string::npos) << rejection(p, dangling);

  // gemm_ar: every rank's collectives in the same order.
  const Problem ar{OpKind::gemm_ar, 32, 16, 16, 2, DType::bf16, DType::bf16, {}};
  ChunkedOptions partition;
  partition.chunks = 2;
  Schedule swapped = make_schedule(ar, partition);
  std::swap(swapped.ranks[1][0], swapped.ranks[1][1]);
  EXPECT_NE(rejection(ar, swapped).find("same order"), std::string::npos) << rejection(ar, swapped);
  // gemm_rs: rows go to the block of the rank that receives them.
  const Problem rs{OpKind::gemm_rs, 32, 16, 16, 2, DType::bf16, DType::bf16, {}};
  Schedule wrong_block = make_schedule(rs, o);
  wrong_block.ranks[0][0].row = 0;
  EXPECT_NE(rejection(rs, wrong_block).find("block"), std::string::npos) << rejection(rs, wrong_block);
  // A JSON field with the wrong type names its place.
  try {
    parse_schedule_json(R"({"op": "ag_gemm", "ranks": [[{"kind": "pull", "peer": "one", "rows": [0, 8]}]]})");
    ADD_FAILURE() << "a peer named by a string must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ranks[0][0]"), std::string::npos) << e.what();
  }
}

TEST(ChunkedPlans, AMissingWaitIsCaughtAsARace) {
  const Problem p{OpKind::ag_gemm, 16, 16, 16, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_chunked(p, small_tiles(ScheduleShape::ring, 2, ChunkBackend::copy_engine));
  ASSERT_TRUE(validate_plan(plan).ok());
  bool removed = false;
  for (Step& step : plan.ranks[0].steps)
    if (auto* gemm = std::get_if<GemmStep>(&step.body))
      for (GemmTile& t : gemm->tiles)
        if (t.wait && !removed) {
          t.wait.reset();
          removed = true;
        }
  ASSERT_TRUE(removed);
  EXPECT_FALSE(validate_plan(plan).ok()) << "a tile reading rows before they arrive is a race";
}

TEST(ChunkedPlans, TilesFollowChunkArrival) {
  // Ring at world 4: rank 0 holds shard 0, then gets shards 1, 2, 3 in that order; its tiles must run
  // in that order of their rows (the tile scheduler follows the chunks, Section 5.2).
  const Problem p{OpKind::ag_gemm, 16, 16, 16, 4, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_chunked(p, small_tiles(ScheduleShape::ring, 1, ChunkBackend::copy_engine));
  for (const Step& step : plan.ranks[0].steps)
    if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
      int64_t last_shard = 0;
      for (const GemmTile& t : gemm->tiles) {
        const int64_t shard = t.tile.row / p.m;
        EXPECT_GE(shard, last_shard) << "tile at row " << t.tile.row << " runs before an earlier-arriving shard's";
        last_shard = shard;
        EXPECT_EQ(t.wait.has_value(), shard != 0) << "own rows need no wait";
      }
    }
  // gemm_rs swizzle: rows sent first are computed first, the own block last.
  const Problem rs{OpKind::gemm_rs, 64, 16, 16, 4, DType::bf16, DType::bf16, {}};
  const Plan rs_plan = plan_chunked(rs, small_tiles(ScheduleShape::swizzle, 1, ChunkBackend::copy_engine));
  for (const Step& step : rs_plan.ranks[1].steps)
    if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
      EXPECT_EQ(gemm->tiles.front().tile.row / 16, 2) << "rank 1 pushes to rank 2 first";
      EXPECT_EQ(gemm->tiles.back().tile.row / 16, 1) << "its own block last";
    }
}

}  // namespace
}  // namespace weft
