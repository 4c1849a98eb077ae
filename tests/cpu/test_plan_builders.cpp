// Property tests: for random shapes (tiny ones, and ones that are not multiples of the tile size),
// world sizes 1 to 8 and random seeds, every builder's plan validates and the reference executor's
// result equals the op computed directly. The seed of a failing case is printed. ag_attention is
// among the ops: causal on odd seeds, grouped-query on every other pair of seeds, head dims 8 and 16,
// token counts ragged against the score tile.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "../support/plan_options.hpp"
#include "../support/random_plans.hpp"
#include "../support/strategy_cases.hpp"
#include "weft/reference/cpu_proof.hpp"
#include "weft/plan/analysis.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {
namespace {

using Case = testing_support::StrategyCase;
using testing_support::case_name;
using testing_support::random_options;
using testing_support::random_problem;

std::vector<Case> all_cases() {
  std::vector<OpKind> ops = all_ops();
  ops.insert(ops.end(), attention_ops().begin(), attention_ops().end());
  return testing_support::strategy_cases(ops, 8);
}

class BuilderProperty : public testing::TestWithParam<Case> {};

TEST_P(BuilderProperty, PlansValidateAndComputeTheOp) {
  const Case c = GetParam();
  const Strategy& strategy = find_strategy(c.strategy);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(c.world));
    Problem p = random_problem(c.op, c.world, rng, seed);
    const PlanOptions o = random_options(c.strategy, p, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + describe(p) + " tile " + std::to_string(o.tile_m) + "x" +
                 std::to_string(o.tile_n) + " AllGather " + std::string(to_string(o.all_gather_source)));
    const Plan plan = strategy.build(p, o);
    ASSERT_EQ(plan.world_size(), c.world);
    const CpuProof proof = prove_on_cpu(plan, seed);
    ASSERT_TRUE(proof.passed()) << proof.explain() << to_string(plan);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, BuilderProperty, testing::ValuesIn(all_cases()), case_name);

// FP8: every GEMM op x strategy x scaling mode at worlds 1 to 8 (ag_attention has no FP8 form), e4m3
// operands (e5m2 A on odd worlds: a backward's gradients) with bf16 or f32 results and K up to 300
// (block scales change along a row, the last block partial). Each plan is proved on the reference
// executor (scales moved with their rows, products in fp32, scales in fp32 per row or per K block),
// or declined as make_plan declines it: block scales with K cut inside a 128-column block.
struct Fp8Case {
  OpKind op;
  std::string strategy;
  Scaling scaling;
  int world;
};

void PrintTo(const Fp8Case& c, std::ostream* out) {
  *out << to_string(c.op) << " " << c.strategy << " " << to_string(c.scaling) << " world " << c.world;
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> cases;
  for (OpKind op : all_ops())
    for (const auto& s : strategies())
      if (s.supports(op))
        for (Scaling scaling : {Scaling::tensor, Scaling::row, Scaling::block})
          for (int world = 1; world <= 8; ++world) cases.push_back({op, s.name, scaling, world});
  return cases;
}

std::string fp8_case_name(const testing::TestParamInfo<Fp8Case>& info) {
  return std::string(to_string(info.param.op)) + "_" + info.param.strategy + "_" + std::string(to_string(info.param.scaling)) + "_w" +
         std::to_string(info.param.world);
}

class Fp8BuilderProperty : public testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8BuilderProperty, PlansProveOrDecline) {
  const Fp8Case c = GetParam();
  const Strategy& strategy = find_strategy(c.strategy);
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    std::mt19937_64 rng(seed * 104729 + static_cast<uint64_t>(c.world));
    Problem p = random_problem(c.op, c.world, rng, seed);
    p.k = 1 + static_cast<int64_t>(rng() % 300);
    p.input_dtype = c.world % 2 ? DType::e5m2 : DType::e4m3;
    p.b_dtype = DType::e4m3;
    p.output_dtype = rng() % 2 ? DType::f32 : DType::bf16;
    p.scaling = c.scaling;
    const PlanOptions o = random_options(c.strategy, p, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + describe(p) + " tile " + std::to_string(o.tile_m) + "x" + std::to_string(o.tile_n));
    const Plan plan = strategy.build(p, o);
    if (const std::string why = first_scale_block_misalignment(plan); !why.empty()) {
      EXPECT_EQ(c.scaling, Scaling::block) << why;  // only block scales tie K to 128-column blocks
      continue;
    }
    const CpuProof proof = prove_on_cpu(plan, seed);
    ASSERT_TRUE(proof.passed()) << proof.explain() << to_string(plan);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Fp8BuilderProperty, testing::ValuesIn(fp8_cases()), fp8_case_name);

// Push-mode AllGather: A stays in the caller's memory (not symmetric, so a call copies nothing in),
// each rank pushes it once to every peer's symmetric gathered A and raises that peer's counter; the
// own shard's GEMM reads A in place and comes first; no rank reads a peer's memory.
TEST(Builders, PushedAllGatherReadsTheCallersShardInPlace) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const Problem p{OpKind::ag_gemm, 24 * world, 40, 32, world, DType::bf16, DType::bf16, {}};
    PlanOptions o = testing_support::tiled(8, 8, Raster::along_m, 1);
    o.all_gather_source = AllGatherSource::push;
    const Plan plan = plan_decomposed(p, o);
    for (const RankPlan& rp : plan.ranks) {
      const BufferDecl& a = rp.buffers.at(static_cast<size_t>(find_buffer(rp, "A")));
      const BufferDecl& gathered = rp.buffers.at(static_cast<size_t>(find_buffer(rp, "A_gathered")));
      EXPECT_FALSE(a.symmetric) << "the caller's A is read where it lies";
      EXPECT_TRUE(gathered.symmetric) << "peers push into it";
      std::set<int> pushed_to;
      for (const Step& step : rp.steps) {
        if (const auto* copy = std::get_if<CopyStep>(&step.body)) {
          EXPECT_EQ(copy->src.rank, rp.rank) << step.label << ": reads only its own memory";
          EXPECT_EQ(copy->src.buffer, find_buffer(rp, "A")) << step.label;
          EXPECT_NE(copy->dst.rank, rp.rank) << step.label;
          EXPECT_EQ(copy->dst.box.row, rp.rank * p.m) << step.label << ": into the rows of this rank's shard";
          ASSERT_EQ(step.notifies.size(), 1u);
          EXPECT_EQ(step.notifies[0].signal.rank, copy->dst.rank) << "raises the receiver's counter";
          pushed_to.insert(copy->dst.rank);
        }
        if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
          EXPECT_EQ(gemm->a.rank, rp.rank) << step.label;
        }
      }
      EXPECT_EQ(static_cast<int>(pushed_to.size()), world - 1) << "one push to every peer";
      const auto* first_gemm = std::get_if<GemmStep>(&rp.steps.at(static_cast<size_t>(world - 1)).body);
      ASSERT_NE(first_gemm, nullptr);
      EXPECT_EQ(first_gemm->a.buffer, find_buffer(rp, "A")) << "the own shard first, in place";
      EXPECT_TRUE(rp.steps.at(static_cast<size_t>(world - 1)).waits.empty());
    }
    const CpuProof proof = prove_on_cpu(plan, 5);
    EXPECT_TRUE(proof.passed()) << proof.explain();
    // Pull, the default, keeps A symmetric (the in-place producer path) and the gathered A local.
    const Plan pulled = plan_decomposed(p, testing_support::tiled(8, 8, Raster::along_m, 1));
    EXPECT_TRUE(pulled.ranks[0].buffers.at(static_cast<size_t>(find_buffer(pulled.ranks[0], "A"))).symmetric);
  }
  // fused pushes chunk by chunk to each peer on a stream per peer, writing the peer's counter for
  // this rank: one writer per counter, the own shard's tiles reading A in place.
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("fused, world " + std::to_string(world));
    const Problem p{OpKind::ag_gemm, 32 * world, 40, 32, world, DType::bf16, DType::bf16, {}};
    PlanOptions o = testing_support::tiled(8, 8, Raster::along_m, 1);
    o.all_gather_source = AllGatherSource::push;
    o.comm_chunks = 2;
    const Plan plan = plan_fused(p, o);
    for (const RankPlan& rp : plan.ranks) {
      EXPECT_FALSE(rp.buffers.at(static_cast<size_t>(find_buffer(rp, "A"))).symmetric);
      int pushes = 0;
      for (const Step& step : rp.steps)
        if (const auto* copy = std::get_if<CopyStep>(&step.body)) {
          EXPECT_EQ(copy->src.rank, rp.rank) << step.label;
          EXPECT_NE(copy->dst.rank, rp.rank) << step.label;
          ++pushes;
        }
      EXPECT_EQ(pushes, 2 * (world - 1)) << "two chunks to every peer";
    }
    for (const auto& [key, raise] : counter_raises(plan)) EXPECT_EQ(raise.writers.size(), 1u) << "counter " << key.second << " of rank " << key.first;
    const CpuProof proof = prove_on_cpu(plan, 6);
    EXPECT_TRUE(proof.passed()) << proof.explain();
  }
  EXPECT_EQ(parse_all_gather_source("push"), AllGatherSource::push);
  EXPECT_THROW(parse_all_gather_source("pushed"), std::invalid_argument);
}

TEST(Builders, PlansArePlainComparableData) {
  Problem p{OpKind::gemm_rs, 16, 8, 8, 2, DType::bf16, DType::bf16, {}};
  const Plan a = plan_decomposed(p, {});
  const Plan b = plan_decomposed(p, {});
  EXPECT_EQ(a, b);
  Plan c = b;
  c.ranks[1].steps[0].label += "!";
  EXPECT_NE(a, c);
  EXPECT_NE(to_string(a).find("push partial to rank 0"), std::string::npos);
}

TEST(Builders, DecomposedRingStartsAfterOwnRank) {
  Problem p{OpKind::ag_gemm, 8, 8, 8, 4, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_decomposed(p, {});
  std::vector<std::string> pulls;
  for (const auto& step : plan.ranks[2].steps)
    if (std::holds_alternative<CopyStep>(step.body)) pulls.push_back(step.label);
  EXPECT_EQ(pulls, (std::vector<std::string>{"pull shard 3", "pull shard 0", "pull shard 1"}));
}

TEST(Builders, DecomposedUsesTwoStreamsAndTheRightEngines) {
  Problem p{OpKind::gemm_ar, 40, 8, 8, 4, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_decomposed(p, {});
  int collectives = 0;
  for (const auto& step : plan.ranks[0].steps)
    if (std::holds_alternative<CollectiveStep>(step.body)) {
      ++collectives;
      EXPECT_EQ(step.stream, 1);
      EXPECT_EQ(step.engine, Engine::nccl);
    }
  EXPECT_EQ(collectives, 4);
}

TEST(Builders, FiccoStepsPullFromEveryPeerAtOnce) {
  // In step j each rank pulls sub-chunk j from all W-1 peers (an all-to-all), not a whole shard from
  // one; each peer's pulls have their own stream, so a step's pulls run at once and a peer's steps in order.
  Problem p{OpKind::ag_gemm, 8, 16, 8, 4, DType::bf16, DType::bf16, {}};
  for (FiccoSchedule schedule : {FiccoSchedule::uniform_fused_1d, FiccoSchedule::hetero_unfused_1d, FiccoSchedule::uniform_fused_2d}) {
    const Plan plan = plan_ficco(p, {}, schedule);
    std::map<int, std::vector<std::string>> pulls_by_stream;
    for (const auto& step : plan.ranks[1].steps)
      if (const auto* copy = std::get_if<CopyStep>(&step.body); copy && copy->src.rank != 1) {
        pulls_by_stream[step.stream].push_back(step.label);
        EXPECT_EQ(schedule == FiccoSchedule::uniform_fused_2d ? copy->src.box.cols : copy->src.box.rows, 2) << step.label;
      }
    ASSERT_EQ(pulls_by_stream.size(), 3u) << to_string(schedule);
    const std::string unit = schedule == FiccoSchedule::uniform_fused_2d ? "slice " : "step ";
    for (const auto& [stream, labels] : pulls_by_stream) {
      ASSERT_EQ(labels.size(), 4u);
      EXPECT_NE(stream, 0) << "pulls never share the GEMMs' stream";
      const std::string peer = labels[0].substr(labels[0].rfind(' '));
      for (int j = 0; j < 4; ++j) EXPECT_EQ(labels[static_cast<size_t>(j)], "pull " + unit + std::to_string(j) + " from rank" + peer);
    }
    const CpuProof proof = prove_on_cpu(plan, 5);
    EXPECT_TRUE(proof.passed()) << proof.explain();
  }
}

TEST(Builders, FiccoTwoDimensionalAccumulatesOverKSlices) {
  Problem p{OpKind::ag_gemm, 8, 16, 12, 3, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_ficco(p, {}, FiccoSchedule::uniform_fused_2d);
  std::vector<bool> accumulate;
  for (const auto& step : plan.ranks[0].steps)
    if (const auto* g = std::get_if<GemmStep>(&step.body)) {
      accumulate.push_back(g->accumulate);
      EXPECT_EQ(g->a.box.rows, 24);  // every rank's rows
      EXPECT_EQ(g->a.box.cols, 4);   // one K slice
    }
  EXPECT_EQ(accumulate, (std::vector<bool>{false, true, true}));
  const CpuProof proof = prove_on_cpu(plan, 9);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

TEST(Builders, FiccoIsOnlyForAllGatherGemm) {
  Problem p{OpKind::gemm_ar, 8, 16, 12, 2, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(plan_ficco(p, {}, FiccoSchedule::hetero_fused_1d), std::invalid_argument);
}

TEST(Builders, ReachingAcrossRanksIsAPropertyOfTheWholePlan) {
  Problem p{OpKind::gemm_a2a, 6, 8, 8, 2, DType::bf16, DType::bf16, {}};
  p.routing = {{0, 0, 0, 0, 0, 0}, {0, 1, 0, 1, 0, 1}};  // rank 0 keeps every row: it pushes nothing
  EXPECT_FALSE(reaches_across_ranks(plan_sequential(p, {})));
  const Plan decomposed = plan_decomposed(p, {});
  EXPECT_TRUE(reaches_across_ranks(decomposed));
  Plan rank0_only = decomposed;
  rank0_only.ranks.resize(1);
  rank0_only.ranks[0].rank = 0;
  EXPECT_FALSE(reaches_across_ranks(rank0_only));  // rank 0 alone never leaves itself; rank 1 does
}

TEST(Builders, UnknownStrategyListsTheKnownOnes) {
  try {
    find_strategy("magic");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequential"), std::string::npos);
  }
}

TEST(Builders, AllToAllWithEmptyAndOverfullDestinations) {
  // Every row goes to rank 2: ranks 0, 1 and 3 receive nothing, rank 2 receives everything; then
  // every rank keeps its own rows (no transfer at all). Both directions: GEMM then all-to-all
  // (MoE combine) and all-to-all then GEMM (MoE dispatch).
  for (OpKind op : {OpKind::gemm_a2a, OpKind::a2a_gemm})
    for (bool keep_own : {false, true}) {
      Problem p{op, 9, 12, 8, 4, DType::bf16, DType::bf16, {}};
      p.routing.assign(4, std::vector<int>(9, 2));
      if (keep_own)
        for (int r = 0; r < 4; ++r) p.routing[static_cast<size_t>(r)].assign(9, r);
      for (const auto& s : strategies()) {
        if (!s.supports(p.op)) continue;
        SCOPED_TRACE(s.name + " " + std::string(to_string(op)) + (keep_own ? " keep own" : " all to rank 2"));
        const CpuProof proof = prove_on_cpu(s.build(p, testing_support::tiled(4, 4, Raster::along_m, 1)), 3);
        EXPECT_TRUE(proof.passed()) << proof.explain();
      }
    }
}

TEST(Builders, BuildersRejectInvalidProblems) {
  Problem p{OpKind::gemm_rs, 10, 8, 8, 3, DType::bf16, DType::bf16, {}};
  for (const auto& s : strategies()) EXPECT_THROW(s.build(p, {}), std::invalid_argument) << s.name;
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// A world of one: make_plan gives every strategy's call as the GEMM alone (one step, the caller's A
// into C, nothing symmetric, no signal), and it computes the op; the strategy's own plan is kept
// where asked for.
TEST(Builders, AWorldOfOneIsTheGemmAloneForEveryStrategy) {
  std::mt19937_64 rng(11);
  for (OpKind op : all_ops()) {
    if (is_moe(op)) continue;
    for (const Strategy& s : strategies()) {
      if (!s.supports(op)) continue;
      SCOPED_TRACE(std::string(to_string(op)) + " " + s.name);
      const Problem p = random_problem(op, 1, rng);
      const Plan plan = make_plan(s, p);
      ASSERT_EQ(plan.ranks.size(), 1u);
      const RankPlan& rp = plan.ranks[0];
      ASSERT_EQ(rp.steps.size(), 1u) << to_string(plan);
      EXPECT_TRUE(std::holds_alternative<GemmStep>(rp.steps[0].body));
      EXPECT_TRUE(rp.signals.empty());
      for (const BufferDecl& b : rp.buffers) {
        EXPECT_FALSE(b.symmetric) << b.name;
        EXPECT_NE(b.role, BufferRole::scratch) << b.name;
      }
      EXPECT_EQ(plan.strategy, s.name);
      EXPECT_FALSE(reaches_across_ranks(plan));
      const CpuProof proof = prove_on_cpu(plan, 3);
      ASSERT_TRUE(proof.passed()) << proof.explain() << to_string(plan);

      PlanOptions keep;
      keep.keep_strategy_at_world_one = true;
      const Plan own = make_plan(s, p, keep);
      EXPECT_TRUE(own == s.build(p, resolve_options(s, p, keep))) << "kept: the strategy's own plan\n" << to_string(own);
    }
  }
}

TEST(Builders, AWorldOfOneKeepsDecliningOpsAStrategyDoesNotImplement) {
  Problem p;
  p.op = OpKind::ag_gemm;
  p.m = 64;
  p.n = 64;
  p.k = 64;
  p.world_size = 1;
  EXPECT_THROW(make_plan(find_strategy("signal"), p), std::invalid_argument);
}

}  // namespace
}  // namespace weft
