// FP8 through the op API on the CPU: weft::Op's spec and call checks (plan/op_arguments.hpp), and
// which strategies' FP8 plans the CUDA executor lowers (plan/gpu_lowering.hpp), where make_plan
// declines the others with the reason and auto passes over them.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <set>

#include "weft/plan/auto.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "../support/expect_refused.hpp"
#include "weft/plan/op_arguments.hpp"

namespace weft {
namespace {

using test_support::expect_refused;

OpShape fp8_shape(OpKind op, Scaling scaling, DType out = DType::bf16, int64_t max_rows = 256) {
  OpShape s{op, 384, 256, max_rows, DType::e4m3, out};
  s.scaling = scaling;
  return s;
}

TEST(Fp8OpArguments, TheFp8SpecsTheApiTakes) {
  for (Scaling scaling : {Scaling::tensor, Scaling::row, Scaling::block})
    for (DType out : {DType::bf16, DType::f32})
      for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm})
        EXPECT_NO_THROW(check_op_shape(fp8_shape(op, scaling, out), 4)) << to_string(op) << " " << to_string(scaling);
  OpShape mixed = fp8_shape(OpKind::gemm_ar, Scaling::row);
  mixed.input_dtype = DType::e5m2;
  mixed.b_dtype = DType::e4m3;
  EXPECT_NO_THROW(check_op_shape(mixed, 2)) << "e5m2 gradients x e4m3 weights";
}

TEST(Fp8OpArguments, BadFp8SpecsAreRefusedNamingWhatIsWrong) {
  OpShape s = fp8_shape(OpKind::gemm_ar, Scaling::none);
  expect_refused([&] { check_op_shape(s, 1); }, "FP8 operands need a scaling mode");
  s = fp8_shape(OpKind::gemm_ar, Scaling::row, DType::e4m3);
  expect_refused([&] { check_op_shape(s, 1); }, "an FP8 GEMM gives bf16 or f32");
  s = fp8_shape(OpKind::gemm_ar, Scaling::row);
  s.input_dtype = DType::e5m2;
  expect_refused([&] { check_op_shape(s, 1); }, "e5m2 x e5m2 is not an FP8 GEMM");
  s = fp8_shape(OpKind::gemm_ar, Scaling::row);
  s.b_dtype = DType::bf16;
  expect_refused([&] { check_op_shape(s, 1); }, "FP8 multiplies only FP8");
  s = fp8_shape(OpKind::gemm_ar, Scaling::row);
  s.b_layout = BLayout::kn;
  expect_refused([&] { check_op_shape(s, 1); }, "an FP8 B is laid out nk");
  s = fp8_shape(OpKind::gemm_ar, Scaling::row);
  s.k = 264;  // a multiple of 8, not of 16
  expect_refused([&] { check_op_shape(s, 1); }, "n=384 and k=264 must be multiples of 16");
  OpShape bf16{OpKind::gemm_ar, 128, 64, 256, DType::bf16, DType::bf16};
  bf16.scaling = Scaling::tensor;
  expect_refused([&] { check_op_shape(bf16, 1); }, "scaling tensor is for FP8 operands");
  bf16.scaling = Scaling::none;
  bf16.output_dtype = DType::f32;
  expect_refused([&] { check_op_shape(bf16, 1); }, "bf16 -> f32 is not supported yet");
}

int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }
int64_t blocks(int64_t n) { return (n + 127) / 128; }

TEST(Fp8OpArguments, ScaleCountsPerMode) {
  const int64_t rows = 37;
  EXPECT_EQ(op_scale_count(fp8_shape(OpKind::gemm_ar, Scaling::tensor), rows, Operand::a), 1);
  EXPECT_EQ(op_scale_count(fp8_shape(OpKind::gemm_ar, Scaling::tensor), rows, Operand::b), 1);
  EXPECT_EQ(op_scale_count(fp8_shape(OpKind::gemm_ar, Scaling::row), rows, Operand::a), rows);
  EXPECT_EQ(op_scale_count(fp8_shape(OpKind::gemm_ar, Scaling::row), rows, Operand::b), 384);
  OpShape block = fp8_shape(OpKind::gemm_ar, Scaling::block);
  block.k = 400;  // a partial last K block
  EXPECT_EQ(op_scale_count(block, rows, Operand::a), blocks(400) * pad4(rows));
  EXPECT_EQ(op_scale_count(block, rows, Operand::b), blocks(384) * pad4(blocks(400)));
  EXPECT_EQ(op_scale_count(OpShape{OpKind::gemm_ar, 128, 64, 256, DType::bf16, DType::bf16}, rows, Operand::a), 0);
}

TEST(Fp8OpArguments, ACallsScalesAreCheckedBeforeLaunch) {
  alignas(16) static float storage[4096];
  const float* good = storage;
  const OpShape row = fp8_shape(OpKind::gemm_ar, Scaling::row);
  EXPECT_NO_THROW(check_op_scales(row, 40, good, 40, good, 384));
  expect_refused([&] { check_op_scales(row, 40, nullptr, 0, good, 384); }, "scale_a is null; row scaling needs 40 scales (one fp32 per row of A)");
  expect_refused([&] { check_op_scales(row, 40, good, 40, nullptr, 0); }, "scale_b is null");
  expect_refused([&] { check_op_scales(row, 40, good, 39, good, 384); }, "scale_a holds 39 scales; row scaling of this call (rows=40 n=384 k=256) needs 40");
  expect_refused([&] { check_op_scales(row, 40, good, 40, good, 1); }, "scale_b holds 1 scales");
  expect_refused([&] { check_op_scales(row, 40, good + 1, 40, good, 384); }, "scale_a at");
  const OpShape tensor = fp8_shape(OpKind::gemm_ar, Scaling::tensor);
  EXPECT_NO_THROW(check_op_scales(tensor, 40, good, 1, good, 1));
  expect_refused([&] { check_op_scales(tensor, 40, good, 40, good, 1); }, "needs 1 (one fp32 for the whole operand)");
  const OpShape block = fp8_shape(OpKind::gemm_ar, Scaling::block);
  EXPECT_NO_THROW(check_op_scales(block, 40, good, 2 * 40, good, 3 * 4));
  expect_refused([&] { check_op_scales(block, 40, good, 2 * 40, good, 3 * 2); }, "needs 12 (fp32 128x128 block scales of B");
  const OpShape bf16{OpKind::gemm_ar, 128, 64, 256, DType::bf16, DType::bf16};
  EXPECT_NO_THROW(check_op_scales(bf16, 40, nullptr, 0, nullptr, 0));
  expect_refused([&] { check_op_scales(bf16, 40, good, 1, nullptr, 0); }, "scale_a is given, but the op's operands are bf16");
}

Problem fp8_problem(OpKind op, int world, Scaling scaling, DType out) {
  Problem p;
  p.op = op;
  p.m = 64 * world;
  p.n = 384;
  p.k = 512;
  p.world_size = world;
  p.input_dtype = DType::e4m3;
  p.output_dtype = out;
  p.scaling = scaling;
  if (routes_rows(op))
    for (int r = 0; r < world; ++r) {
      p.routing.emplace_back();
      for (int64_t i = 0; i < p.m; ++i) p.routing.back().push_back(static_cast<int>((i + r) % world));
    }
  return p;
}

PlanOptions lowerable_only() {
  PlanOptions o;
  o.gpu_lowerable_only = true;
  return o;
}

// Which (op, strategy) pairs run FP8 on the GPU at a world above one, by scaling mode and output
// dtype; every other pair declines through make_plan with the gap's reason.
std::map<std::string, std::set<std::string>> runnable_fp8_strategies(int world) {
  std::map<std::string, std::set<std::string>> runs;
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm})
    for (Scaling scaling : {Scaling::tensor, Scaling::row, Scaling::block})
      for (DType out : {DType::bf16, DType::f32})
        for (const Strategy& s : strategies()) {
          if (!s.supports(op) || s.name == "auto") continue;
          const Problem p = fp8_problem(op, world, scaling, out);
          const std::string key = std::string(to_string(op)) + " " + std::string(to_string(scaling)) + "->" + std::string(to_string(out));
          Plan plan;
          try {
            plan = make_plan(s, p, PlanOptions{});
          } catch (const std::invalid_argument&) {
            continue;  // declined for its own reasons (ficco 2D's K slices of block scales)
          }
          const std::optional<std::string> gap = gpu_lowering_gap(plan, {false});
          try {
            const Plan kept = make_plan(s, p, lowerable_only());
            EXPECT_FALSE(gap) << s.name << " " << key << ": make_plan kept a plan with a gap: " << *gap;
            runs[key].insert(s.name);
          } catch (const std::invalid_argument& e) {
            EXPECT_TRUE(gap) << s.name << " " << key << " declined without a gap: " << e.what();
            if (gap) {
              EXPECT_NE(std::string(e.what()).find("strategy '" + s.name + "' declines e4m3 here on the GPU: " + *gap), std::string::npos)
                  << e.what();
            }
          }
        }
  return runs;
}

TEST(Fp8OpStrategies, EveryStrategyRunsAtWorldOneAsItsLibraryGemm) {
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm})
    for (Scaling scaling : {Scaling::tensor, Scaling::row, Scaling::block})
      for (const Strategy& s : strategies()) {
        if (!s.supports(op)) continue;
        const Plan plan = make_plan(s, fp8_problem(op, 1, scaling, DType::f32), lowerable_only());
        EXPECT_EQ(plan.ranks.at(0).steps.size(), 1u) << s.name;
      }
}

TEST(Fp8OpStrategies, AboveWorldOneTensorAndRowScalesRunOnEveryGemmOverBf16Reductions) {
  for (int world : {2, 4, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const auto runs = runnable_fp8_strategies(world);
    for (const auto& [key, names] : runs) {
      std::string list;
      for (const std::string& n : names) list += " " + n;
      std::cout << "world " << world << " " << key << ":" << list << "\n";
      // NCCL's all-gather and the copies of FP8 rows with tensor or row scales run (ag_gemm's
      // sequential, decomposed, two_level and the FiCCO schedules on library GEMMs); block-scaled
      // rows, a2a_gemm's all-to-all of tokens and f32 partial sums have no lowering.
      if (key.find("ag_gemm") != std::string::npos) {
        EXPECT_EQ(key.find("block"), std::string::npos) << key << list;
        EXPECT_TRUE(names.count("sequential") && names.count("decomposed")) << key << list;
      } else {
        EXPECT_EQ(key.find("->f32"), std::string::npos) << key << list;  // f32 partial sums
      }
      EXPECT_EQ(key.find("a2a_gemm"), std::string::npos) << key << list;
      // The overlap GEMM's FP8 main loop applies tensor and row scales in its epilogue and stores
      // bf16: no block scales, no f32 partial sums on it.
      for (const std::string& n : names)
        if (find_strategy(n).overlap_gemm) {
          EXPECT_EQ(key.find("block"), std::string::npos) << n << " runs block-scaled FP8 on the overlap GEMM";
          EXPECT_EQ(key.find("->f32"), std::string::npos) << n << " runs f32 partial sums on the overlap GEMM";
        }
    }
    // The overlapped strategies whose steps all lower run FP8 on the overlap GEMM: fused (waits on
    // the pulls, or stores to peers), signal (notifies), chunked and tilelink's RS.
    for (const auto& [key, strategies] : std::map<std::string, std::vector<std::string>>{
             {"ag_gemm tensor->bf16", {"fused", "chunked"}}, {"ag_gemm row->bf16", {"fused", "chunked"}},
             {"gemm_rs tensor->bf16", {"fused", "signal", "chunked", "tilelink"}}, {"gemm_rs row->bf16", {"fused", "signal", "chunked", "tilelink"}},
             {"gemm_ar tensor->bf16", {"signal", "chunked"}}, {"gemm_ar row->bf16", {"signal", "chunked"}}}) {
      ASSERT_TRUE(runs.count(key)) << key;
      for (const std::string& n : strategies) EXPECT_TRUE(runs.at(key).count(n)) << key << ": " << n;
    }
    // The baselines: a library GEMM, then NCCL's reduction of bf16 partial sums.
    for (const char* key : {"gemm_rs tensor->bf16", "gemm_rs row->bf16", "gemm_ar tensor->bf16", "gemm_ar row->bf16", "gemm_ar block->bf16",
                            "ag_gemm tensor->bf16", "ag_gemm row->bf16", "ag_gemm tensor->f32", "ag_gemm row->f32"}) {
      ASSERT_TRUE(runs.count(key)) << key;
      EXPECT_TRUE(runs.at(key).count("sequential")) << key;
    }
  }
}

// The premise of the GPU test Fp8OverlapGemm.TablesThatWaitNotifyOrStoreElsewhereMatchTheScaledProduct:
// these strategies kept at world 1 give FP8 GEMMs whose tables wait or notify (the overlap GEMM's
// features, not a plain table), and the gate admits them.
TEST(Fp8OpStrategies, KeptAtWorldOneTheirTablesWaitOrNotifyAndLower) {
  PlanOptions keep;
  keep.keep_strategy_at_world_one = true;
  for (const Scaling scaling : {Scaling::tensor, Scaling::row})
    for (const auto& [strategy, op, m, n, k] : {std::tuple{"fused", OpKind::ag_gemm, 256, 512, 1024}, std::tuple{"signal", OpKind::gemm_ar, 256, 512, 1024},
                                                 std::tuple{"signal", OpKind::gemm_ar, 200, 264, 400}, std::tuple{"chunked", OpKind::gemm_ar, 256, 512, 1024},
                                                 std::tuple{"chunked", OpKind::gemm_ar, 200, 264, 400}}) {
      // (fused ag_gemm at 200 rows, and chunked ag_gemm, are one plain GEMM at world 1.)
      Problem p = fp8_problem(op, 1, scaling, DType::bf16);
      p.m = m, p.n = n, p.k = k;
      const Plan plan = make_plan(find_strategy(strategy), p, keep);
      bool overlapped = false;
      for (const Step& step : plan.ranks.at(0).steps)
        if (const auto* g = std::get_if<GemmStep>(&step.body)) overlapped = overlapped || !is_plain_tile_table(*g);
      EXPECT_TRUE(overlapped) << strategy << " " << describe(p);
      EXPECT_FALSE(gpu_lowering_gap(plan, {false})) << strategy << " " << describe(p);
    }
}

TEST(Fp8OpStrategies, GemmsOfAtMost64RowsRunTheFp8MainLoopOn64RowTiles) {
  // A per-rank GEMM of at most 64 rows takes FP8's 64x128x128 tile (model/tiling.hpp), inside the
  // overlapped strategies' tables too: each such plan at world 2 validates, puts 64x128 tiles in its
  // overlap-GEMM steps and lowers (the strategies whose tables wait, notify or store to peers).
  for (const Scaling scaling : {Scaling::tensor, Scaling::row})
    for (const auto& [strategy, op] : {std::pair{"fused", OpKind::gemm_rs}, std::pair{"signal", OpKind::gemm_rs}, std::pair{"chunked", OpKind::gemm_rs},
                                       std::pair{"tilelink", OpKind::gemm_rs}, std::pair{"signal", OpKind::gemm_ar}, std::pair{"chunked", OpKind::gemm_ar}}) {
      Problem p = fp8_problem(op, 2, scaling, DType::bf16);
      p.m = 64, p.n = 512, p.k = 1024;
      const Plan plan = make_plan(find_strategy(strategy), p, lowerable_only());
      int overlapped = 0;
      for (const RankPlan& rank : plan.ranks)
        for (const Step& step : rank.steps)
          if (const auto* g = std::get_if<GemmStep>(&step.body); g && !is_plain_tile_table(*g)) {
            ++overlapped;
            EXPECT_TRUE(g->tile_m == 64 && g->tile_n == 128) << strategy << " " << describe(p) << ": " << g->tile_m << "x" << g->tile_n;
          }
      EXPECT_GT(overlapped, 0) << strategy << " " << describe(p);
      EXPECT_FALSE(gpu_lowering_gap(plan, {false})) << strategy << " " << describe(p);
    }
}

TEST(Fp8OpStrategies, TheGapNamesTheStepAndWhatIsMissing) {
  // NCCL's all-gather moves FP8 rows with tensor or row scales, not block-scaled ones.
  EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("sequential"), fp8_problem(OpKind::ag_gemm, 2, Scaling::row, DType::bf16)),
                                {false}));
  const Plan gather = make_plan(find_strategy("sequential"), fp8_problem(OpKind::ag_gemm, 2, Scaling::block, DType::bf16));
  const auto gap = gpu_lowering_gap(gather, {false});
  ASSERT_TRUE(gap);
  EXPECT_NE(gap->find("collective step"), std::string::npos) << *gap;
  EXPECT_NE(gap->find("touches e4m3 data"), std::string::npos) << *gap;
  // sequential moe_rs: bf16 rows go to an expert-major layout (a row permutation, which FP8 rows do
  // not have on the GPU); FP8 rows are read in place by a GEMM per (source, expert), which lowers.
  for (const DType dtype : {DType::e4m3, DType::bf16}) {
    Problem moe{OpKind::moe_rs, 64, 128, 128, 2, dtype, DType::bf16, {}};
    moe.scaling = dtype == DType::e4m3 ? Scaling::row : Scaling::none;
    moe.experts = 4;
    moe.topk = 2;
    draw_routing(moe, 5);
    EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("sequential"), moe), {false})) << to_string(dtype);
  }
  // decomposed: the caller's FP8 A copied into symmetric memory with its scales, the peers' rows
  // pulled by the copy engine with theirs, per-shard library GEMMs: all lowered.
  EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("decomposed"), fp8_problem(OpKind::ag_gemm, 2, Scaling::row, DType::bf16)), {false}));
  // FiCCO's 2D schedule cuts K by the world size: at world 3 K=4096 is cut at 1365 and 2730, which
  // cuBLASLt's FP8 matmul cannot read (16-byte units): declined, where world 2's halves run.
  Problem sliced = fp8_problem(OpKind::ag_gemm, 3, Scaling::row, DType::bf16);
  sliced.k = 4096;
  const auto k_slices = gpu_lowering_gap(make_plan(find_strategy("ficco_uniform_fused_2d"), sliced), {false});
  ASSERT_TRUE(k_slices);
  EXPECT_NE(k_slices->find("K slices that start and end at multiples of 16"), std::string::npos) << *k_slices;
  sliced.world_size = 2;
  sliced.m = 128;
  EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("ficco_uniform_fused_2d"), sliced), {false}));
  // fused: its GEMM waits on the pulls, so it is the overlap GEMM: its FP8 main loop on 128x128
  // tiles (the FP8 tiling), row scales in the epilogue.
  const Plan fused = make_plan(find_strategy("fused"), fp8_problem(OpKind::ag_gemm, 2, Scaling::row, DType::bf16));
  EXPECT_FALSE(gpu_lowering_gap(fused, {false}));
  for (const Step& step : fused.ranks.at(0).steps)
    if (const auto* g = std::get_if<GemmStep>(&step.body)) EXPECT_TRUE(g->tile_m == 128 && g->tile_n == 128) << g->tile_m << "x" << g->tile_n;
  // Its tile on another shape than the FP8 main loop's: declined, naming both.
  Plan wide = fused;
  for (Step& step : wide.ranks.at(0).steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) g->tile_n = 256;
  const auto wide_gap = gpu_lowering_gap(wide, {false});
  ASSERT_TRUE(wide_gap);
  EXPECT_NE(wide_gap->find("128x256 tiles; its FP8 main loop is compiled for 128x128 and 64x128 only"), std::string::npos) << *wide_gap;
  const Plan reduce = make_plan(find_strategy("sequential"), fp8_problem(OpKind::gemm_rs, 2, Scaling::row, DType::f32));
  const auto f32 = gpu_lowering_gap(reduce, {false});
  ASSERT_TRUE(f32);
  EXPECT_NE(f32->find("touches f32 data"), std::string::npos) << *f32;
  const Plan alone = make_plan(find_strategy("sequential"), fp8_problem(OpKind::gemm_ar, 1, Scaling::block, DType::bf16));
  EXPECT_FALSE(gpu_lowering_gap(alone, {false}));
  const auto on_overlap = gpu_lowering_gap(alone, {true});
  ASSERT_TRUE(on_overlap);
  EXPECT_NE(on_overlap->find("block scales; the overlap GEMM's FP8 epilogue applies tensor and row scales only"), std::string::npos) << *on_overlap;
  // Tensor and row scales on 128x128 tiles run there, split along K too (weft bench gemm --dtype e4m3).
  for (const Scaling scaling : {Scaling::tensor, Scaling::row}) {
    PlanOptions tiles;
    tiles.tile_m = tiles.tile_n = 128;
    tiles.k_splits = 2;
    EXPECT_FALSE(gpu_lowering_gap(plan_sequential(fp8_problem(OpKind::gemm_ar, 1, scaling, DType::bf16), tiles), {true})) << to_string(scaling);
  }
  // In clusters of two on 128x128 (the FP8 main loop is compiled for them); on 128x256 declined.
  for (const auto& [cm, cn] : {std::pair{2, 1}, std::pair{1, 2}}) {
    PlanOptions tiles;
    tiles.tile_m = tiles.tile_n = 128;
    Plan clustered = plan_sequential(fp8_problem(OpKind::gemm_ar, 1, Scaling::row, DType::bf16), tiles);
    GemmStep* gemm = nullptr;
    for (Step& step : clustered.ranks.at(0).steps)
      if (auto* g = std::get_if<GemmStep>(&step.body)) gemm = g;
    ASSERT_NE(gemm, nullptr);
    gemm->cluster_m = cm, gemm->cluster_n = cn;
    EXPECT_FALSE(gpu_lowering_gap(clustered, {true})) << cm << "x" << cn;
    gemm->tile_n = 256;
    const auto gap = gpu_lowering_gap(clustered, {true});
    ASSERT_TRUE(gap);
    EXPECT_NE(gap->find("e4m3 on 128x128 tiles"), std::string::npos) << *gap;
  }
  // Block scales: cuBLASLt runs rows that are multiples of 4 only; other row counts are declined,
  // naming the padding.
  Problem ragged = fp8_problem(OpKind::gemm_ar, 1, Scaling::block, DType::bf16);
  ragged.m = 202;
  const auto rows = gpu_lowering_gap(make_plan(find_strategy("sequential"), ragged), {false});
  ASSERT_TRUE(rows);
  EXPECT_NE(rows->find("202 rows of block-scaled A"), std::string::npos) << *rows;
  EXPECT_NE(rows->find("pad the rows to 204"), std::string::npos) << *rows;
  ragged.m = 204;
  EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("sequential"), ragged), {false}));
  ragged.scaling = Scaling::row;
  ragged.m = 202;
  EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy("sequential"), ragged), {false}));
  // bf16 plans have nothing to decline.
  Problem bf16 = fp8_problem(OpKind::ag_gemm, 4, Scaling::none, DType::bf16);
  bf16.input_dtype = DType::bf16;
  for (const char* s : {"sequential", "decomposed", "fused", "chunked", "signal"})
    if (find_strategy(s).supports(bf16.op)) {
      EXPECT_FALSE(gpu_lowering_gap(make_plan(find_strategy(s), bf16), {false})) << s;
    }
}

TEST(Fp8OpStrategies, AutoPicksAmongTheStrategiesThatRunOrSaysWhyNoneDoes) {
  for (int world : {2, 4}) {
    const Problem rs = fp8_problem(OpKind::gemm_rs, world, Scaling::row, DType::bf16);
    const Plan chosen = make_plan(find_strategy("auto"), rs, lowerable_only());
    EXPECT_FALSE(gpu_lowering_gap(chosen, {false})) << chosen.strategy;
    // ag_gemm: among what runs (sequential, decomposed, two_level, FiCCO's).
    const Plan gather = make_plan(find_strategy("auto"), fp8_problem(OpKind::ag_gemm, world, Scaling::row, DType::bf16), lowerable_only());
    EXPECT_FALSE(gpu_lowering_gap(gather, {false})) << gather.strategy;
    expect_refused([&] { make_plan(find_strategy("auto"), fp8_problem(OpKind::ag_gemm, world, Scaling::block, DType::bf16), lowerable_only()); },
                   "auto: no strategy runs ag_gemm e4m3 here: strategy 'sequential' declines e4m3 here on the GPU");
  }
}

}  // namespace
}  // namespace weft
