// ag_attention (ir/problem.hpp) and its plans: the reference semantics on inputs whose answer is
// known, the shape of each strategy's plan at world 4 (which blocks a causal rank reads, where each
// KV tile waits, which steps merge), the checks that catch a broken attention step, and the
// simulator's cost of causal masking. The property test over random shapes and worlds 1-8 is in
// test_plan_builders.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "weft/model/simulator.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft {
namespace {

Problem attention(int world, int64_t tokens, int heads, int kv_heads, int head_dim, bool causal, int batch = 1) {
  Problem p;
  p.op = OpKind::ag_attention;
  p.world_size = world;
  p.m = tokens;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.causal = causal;
  return p;
}

PlanOptions score_tile(int queries, int keys) {
  PlanOptions o;
  o.tile_m = queries;
  o.tile_n = keys;
  return o;
}

std::vector<const AttentionStep*> attention_steps(const RankPlan& rp) {
  std::vector<const AttentionStep*> steps;
  for (const Step& s : rp.steps)
    if (const auto* a = std::get_if<AttentionStep>(&s.body)) steps.push_back(a);
  return steps;
}

AttentionStep& only_attention(Plan& plan, int rank) {
  for (Step& s : plan.ranks.at(static_cast<size_t>(rank)).steps)
    if (auto* a = std::get_if<AttentionStep>(&s.body)) return *a;
  throw std::logic_error("no attention step on rank " + std::to_string(rank));
}

bool has_error(const ValidationReport& report, const std::string& rule, const std::string& words) {
  for (const PlanError& e : report.errors)
    if (e.rule == rule && e.message.find(words) != std::string::npos) return true;
  return false;
}

TEST(AttentionProblem, ChecksItsShapeAndKeepsItsFieldsToItself) {
  Problem p = attention(2, 8, 4, 2, 16, true, 3);
  EXPECT_NO_THROW(check_problem(p));
  EXPECT_EQ(query_cols(p), 3 * 4 * 16);
  EXPECT_EQ(key_cols(p), 3 * 2 * 16);
  EXPECT_EQ(lse_cols(p), 3 * 4);
  EXPECT_EQ(output_rows(p, 1), 8);
  EXPECT_EQ(describe(p), "ag_attention m=8 batch=3 heads=4 kv_heads=2 head_dim=16 causal world=2 bf16->bf16");
  EXPECT_EQ(parse_op("ag_attention"), OpKind::ag_attention);
  EXPECT_TRUE(std::find(all_ops().begin(), all_ops().end(), OpKind::ag_attention) == all_ops().end())
      << "the GEMM ops' GPU sweeps iterate all_ops(); ag_attention has its own (tests/gpu/test_attention.cpp)";
  auto rejects = [](Problem q, const std::string& words) {
    try {
      check_problem(q);
      ADD_FAILURE() << "accepted " << describe(q);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Problem bad = p;
  bad.heads = 3;
  rejects(bad, "must be a multiple of kv_heads");
  bad = p;
  bad.n = 64;
  rejects(bad, "leave n and k 0");
  bad = p;
  bad.head_dim = 0;
  rejects(bad, "head_dim >= 1");
  Problem gemm{OpKind::ag_gemm, 8, 8, 8, 2, DType::bf16, DType::bf16, {}};
  gemm.causal = true;
  rejects(gemm, "only meaningful for ag_attention");
}

// Inputs whose attention is known without computing a softmax: causal, the first query sees only the
// first key, so its output is that key's value row; every key/value head's values are a constant
// of its own, so each query head's output names the head it read (GQA: query head h reads key/value
// head h / (heads / kv_heads) of its own batch entry).
TEST(AttentionReference, CausalFirstQueryAndGroupedHeadsAreWhatTheDefinitionSays) {
  const Problem p = attention(2, 3, 4, 2, 8, true, 2);
  std::vector<RankTensors> inputs = random_inputs(p, 7);
  auto expected = expected_outputs(p, inputs);
  const HostMatrix& v0 = inputs[0].at("V");
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int e = 0; e < 8; ++e)
        EXPECT_EQ(expected[0].at(0, (b * 4 + h) * 8 + e), v0.at(0, (b * 2 + h / 2) * 8 + e)) << "b " << b << " h " << h;
  for (RankTensors& rank : inputs)
    for (int64_t t = 0; t < p.m; ++t)
      for (int64_t c = 0; c < key_cols(p); ++c) rank.at("V").at(t, c) = static_cast<float>(c / 8 + 1);  // head g of batch b: b * 2 + g + 1
  expected = expected_outputs(p, inputs);
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < p.m; ++i)
      for (int b = 0; b < 2; ++b)
        for (int h = 0; h < 4; ++h) EXPECT_NEAR(expected[static_cast<size_t>(r)].at(i, (b * 4 + h) * 8 + 3), b * 2 + h / 2 + 1, 1e-6);
}

// Without a mask every query of every rank sees the same keys: equal queries get equal outputs
// across ranks; with the mask a later rank's copy of the query sees more keys and differs.
TEST(AttentionReference, OnlyTheCausalMaskTellsRanksApart) {
  for (const bool causal : {false, true}) {
    const Problem p = attention(3, 4, 2, 2, 8, causal);
    std::vector<RankTensors> inputs = random_inputs(p, 3);
    for (RankTensors& rank : inputs) rank.at("Q") = inputs[0].at("Q");
    const auto out = expected_outputs(p, inputs);
    double differs = 0;
    for (size_t i = 0; i < out[0].data.size(); ++i) differs = std::max(differs, static_cast<double>(std::fabs(out[0].data[i] - out[2].data[i])));
    if (causal) {
      EXPECT_GT(differs, 1e-3);
    } else {
      EXPECT_LT(differs, 1e-6);
    }
  }
}

// decomposed at world 4: the own keys first, in place, then each peer's block in ring order, each
// pulled (K and V) onto its own counter and merged; causal rank r reads only blocks 0..r.
TEST(AttentionPlans, RingReadsOwnKeysInPlaceThenMergesEachPulledBlock) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Problem p = attention(4, 6, 4, 2, 8, causal);
    const Plan plan = plan_decomposed(p, score_tile(4, 4));
    for (const RankPlan& rp : plan.ranks) {
      const int r = rp.rank;
      const auto steps = attention_steps(rp);
      std::vector<int> blocks;
      for (const AttentionStep* a : steps) blocks.push_back(static_cast<int>(a->kv_position / p.m));
      std::vector<int> want{r};
      for (int i = 1; i < 4; ++i)
        if (!causal || (r + i) % 4 <= r) want.push_back((r + i) % 4);
      EXPECT_EQ(blocks, want) << "rank " << r;
      ASSERT_FALSE(steps.empty());
      EXPECT_EQ(steps[0]->k.buffer, find_buffer(rp, "K")) << "the own keys where the caller has them";
      EXPECT_FALSE(steps[0]->merge);
      for (size_t i = 1; i < steps.size(); ++i) {
        EXPECT_TRUE(steps[i]->merge);
        EXPECT_EQ(steps[i]->k.buffer, find_buffer(rp, "K_gathered"));
      }
      int pulls = 0;
      for (const Step& s : rp.steps)
        if (const auto* copy = std::get_if<CopyStep>(&s.body)) {
          ++pulls;
          EXPECT_NE(copy->src.rank, r);
          EXPECT_EQ(s.engine, Engine::copy_engine);
        }
      EXPECT_EQ(pulls, 2 * static_cast<int>(want.size() - 1)) << "K and V of every block read";
    }
    const CpuProof proof = prove_on_cpu(plan, 4);
    EXPECT_TRUE(proof.passed()) << proof.explain();
  }
}

// tilelink at world 4: one attention step; every KV tile waits for both pulls (K, V) of the
// communication tile holding its rows; the own block is first and copied locally; a causal rank
// neither pulls nor lists the blocks after its own (rank 0 pulls nothing).
TEST(AttentionPlans, TileWaitsFollowTheirOwnPullsOwnBlockFirst) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Problem p = attention(4, 7, 2, 1, 8, causal);
    PlanOptions o = score_tile(4, 2);
    o.tilelink.comm_tile_rows = 3;  // communication tiles of 3, 3 and 1 rows; KV tiles of at most 2 within them
    const Plan plan = plan_tilelink(p, o);
    for (const RankPlan& rp : plan.ranks) {
      const int r = rp.rank;
      const auto steps = attention_steps(rp);
      ASSERT_EQ(steps.size(), 1u);
      const AttentionStep& a = *steps[0];
      EXPECT_EQ(a.sm_limit, 0) << "copy engines move the keys: every SM computes";
      ASSERT_FALSE(a.kv_tiles.empty());
      EXPECT_EQ(a.kv_tiles.front().row, r * p.m) << "the own keys first";
      // The own block is copied into place on the attention kernel's stream, before it: its KV tiles
      // wait for nothing (a local copy runs as a kernel, which the waiting kernel would starve).
      size_t attention_at = 0, own_copies = 0;
      while (!std::holds_alternative<AttentionStep>(rp.steps[attention_at].body)) ++attention_at;
      for (size_t i = 0; i < rp.steps.size(); ++i) {
        const Step& s = rp.steps[i];
        const auto* copy = std::get_if<CopyStep>(&s.body);
        if (!copy || copy->src.rank != r) continue;
        ++own_copies;
        EXPECT_LT(i, attention_at) << s.label;
        EXPECT_EQ(s.stream, rp.steps[attention_at].stream) << s.label;
        EXPECT_TRUE(s.notifies.empty()) << s.label;
        EXPECT_EQ(copy->dst.box.row, r * p.m);
        EXPECT_EQ(copy->dst.box.rows, p.m);
      }
      EXPECT_EQ(own_copies, 2u) << "K and V";
      std::set<int> blocks;
      for (const KvTile& t : a.kv_tiles) {
        blocks.insert(static_cast<int>(t.row / p.m));
        if (t.row / p.m == r) {
          EXPECT_FALSE(t.wait.has_value()) << "own KV tile at row " << t.row;
          continue;
        }
        ASSERT_TRUE(t.wait.has_value());
        EXPECT_EQ(t.wait->value, 2u);
        // The counter it waits on is raised by exactly the two copies that write its rows.
        int raisers = 0;
        for (const Step& s : rp.steps) {
          const auto* copy = std::get_if<CopyStep>(&s.body);
          if (!copy || s.notifies.empty() || !(s.notifies[0].signal == t.wait->signal)) continue;
          ++raisers;
          EXPECT_LE(copy->dst.box.row, t.row);
          EXPECT_GE(copy->dst.box.row_end(), t.row + t.rows);
          EXPECT_EQ(s.engine, Engine::copy_engine);
        }
        EXPECT_EQ(raisers, 2);
        EXPECT_LE(t.rows, 2);
      }
      EXPECT_EQ(static_cast<int>(blocks.size()), causal ? r + 1 : 4) << "rank " << r;
      if (causal) {
        EXPECT_EQ(*blocks.rbegin(), r);
      }
    }
    const CpuProof proof = prove_on_cpu(plan, 6);
    EXPECT_TRUE(proof.passed()) << proof.explain();
  }
}

TEST(AttentionPlans, AWorldOfOneIsTheAttentionAlone) {
  const Problem p = attention(1, 9, 4, 4, 16, true);
  for (const char* name : {"sequential", "decomposed", "tilelink", "auto"}) {
    SCOPED_TRACE(name);
    const Plan plan = make_plan(find_strategy(name), p, score_tile(4, 4));
    ASSERT_EQ(plan.ranks[0].steps.size(), 1u) << to_string(plan);
    EXPECT_TRUE(std::holds_alternative<AttentionStep>(plan.ranks[0].steps[0].body));
    EXPECT_FALSE(reaches_across_ranks(plan));
    EXPECT_TRUE(plan.ranks[0].signals.empty());
    const CpuProof proof = prove_on_cpu(plan, 2);
    EXPECT_TRUE(proof.passed()) << proof.explain();
  }
  EXPECT_THROW(make_plan(find_strategy("fused"), p), std::invalid_argument) << "fused has no attention plan";
}

// What the checks catch in a broken attention step (each would compute a wrong or racy result).
TEST(AttentionChecks, CatchMissingWaitsKeysMergesAndLseType) {
  const Problem p = attention(3, 5, 2, 2, 8, false);
  const Plan tiles = plan_tilelink(p, score_tile(4, 2));
  const Plan ring = plan_decomposed(p, score_tile(4, 4));
  ASSERT_TRUE(validate_plan(tiles).ok());
  ASSERT_TRUE(validate_plan(ring).ok());

  Plan plan = tiles;  // a peer's KV tile that no longer waits reads keys a pull may still write
  only_attention(plan, 0).kv_tiles.back().wait.reset();
  EXPECT_TRUE(has_error(validate_plan(plan), "ordering", "race")) << validate_plan(plan).summary();

  plan = tiles;  // waiting for the K pull only: V is read unordered
  only_attention(plan, 1).kv_tiles.back().wait->value = 1;
  const ValidationReport half = validate_plan(plan);
  EXPECT_TRUE(has_error(half, "ordering", "V_gathered")) << half.summary();

  plan = tiles;  // a block left out of a step that is not causal
  only_attention(plan, 2).kv_tiles.pop_back();
  EXPECT_TRUE(has_error(validate_plan(plan), "structure", "is in no KV tile")) << validate_plan(plan).summary();

  plan = tiles;  // a key read twice would count twice
  only_attention(plan, 2).kv_tiles.push_back(only_attention(plan, 2).kv_tiles.front());
  EXPECT_TRUE(has_error(validate_plan(plan), "structure", "overlap")) << validate_plan(plan).summary();

  plan = ring;  // a peer block's step that overwrites instead of merging: O produced twice
  for (Step& s : plan.ranks[1].steps)
    if (auto* a = std::get_if<AttentionStep>(&s.body)) a->merge = false;
  EXPECT_TRUE(has_error(validate_plan(plan), "coverage", "(expected exactly once)")) << validate_plan(plan).summary();

  plan = ring;  // the own step merging into an O nobody wrote
  std::get<AttentionStep>(plan.ranks[0].steps[0].body).merge = true;
  EXPECT_TRUE(has_error(validate_plan(plan), "ordering", "no write of it is guaranteed")) << validate_plan(plan).summary();

  plan = ring;  // a bf16 log-sum-exp would make every merge inexact
  for (RankPlan& rp : plan.ranks) rp.buffers[static_cast<size_t>(find_buffer(rp, "LSE"))].dtype = DType::bf16;
  EXPECT_TRUE(has_error(validate_plan(plan), "structure", "declare it f32")) << validate_plan(plan).summary();

  plan = ring;  // heads that do not divide: 2 query heads over 3 key/value heads
  only_attention(plan, 0).head_dim = 4;
  only_attention(plan, 0).k.box.cols = 12;
  only_attention(plan, 0).v.box.cols = 12;
  EXPECT_TRUE(has_error(validate_plan(plan), "structure", "evenly")) << validate_plan(plan).summary();
}

// A causal query tile skips the KV tiles after its last query: about half the FLOPs of the unmasked
// attention over a long sequence. Sharded by sequence, the last rank still reads all but half a
// block (the first rank half a block): causal plans are as slow as their last rank. Copy-engine
// pulls under the attention hide most of the gather.
TEST(AttentionSimulator, CausalMaskingSkipsHiddenBlocksAndOverlapHidesTheGather) {
  MachineProfile m;
  PlanOptions o;
  o.machine = m;
  auto run = [&](const char* strategy, int world, int64_t tokens, bool causal) {
    const Simulation s = simulate(make_plan(find_strategy(strategy), attention(world, tokens, 32, 8, 128, causal), o), m);
    EXPECT_TRUE(s.stuck.empty()) << s.stuck;
    return s;
  };
  // One rank: 8192 queries over 8192 keys, 32 heads (several waves of query tiles), 4 q k d FLOPs per head.
  const double full = 4.0 * 8192 * 8192 * 128 * 32 / (m.peak_flops * m.attention_efficiency);
  const double alone = run("sequential", 1, 8192, false).seconds;
  EXPECT_GT(alone, full);
  EXPECT_LT(alone, 1.2 * full);
  EXPECT_LT(run("sequential", 1, 8192, true).seconds, 0.6 * alone) << "the causal mask skips the blocks after each query tile";
  const Simulation causal = run("decomposed", 4, 2048, true);
  for (int r = 1; r < 4; ++r) EXPECT_LT(causal.rank_seconds[static_cast<size_t>(r) - 1], causal.rank_seconds[static_cast<size_t>(r)]);
  EXPECT_LT(causal.rank_seconds[0], 0.5 * causal.rank_seconds[3]) << "rank 0 reads half a block, rank 3 three and a half";
  const double sequential = run("sequential", 4, 2048, false).seconds;
  EXPECT_LT(run("tilelink", 4, 2048, false).seconds, sequential);
  EXPECT_LT(run("decomposed", 4, 2048, false).seconds, sequential);
}


// The CUDA executor's dtype gate (plan/gpu_lowering.hpp, which refuses FP8 plans it cannot lower)
// passes every attention plan to the attention lowering: their bf16 Q/K/V/O move as any bf16 rows,
// and the f32 log-sum-exp is the attention step's own (a gap here would refuse every ag_attention
// call on the GPU before its kernel ran).
TEST(AttentionPlans, TheExecutorsDtypeGateLetsEveryStrategyThrough) {
  for (int world : {1, 2, 4})
    for (bool causal : {false, true})
      for (const char* name : {"sequential", "decomposed", "tilelink"}) {
        const Problem p = attention(world, 256, 8, 2, 64, causal);
        const Plan plan = make_plan(find_strategy(name), p);
        const auto gap = gpu_lowering_gap(plan, GpuLoweringOptions{});
        EXPECT_FALSE(gap) << name << " world " << world << (causal ? " causal" : "") << ": " << gap.value_or("");
      }
}

}  // namespace
}  // namespace weft
