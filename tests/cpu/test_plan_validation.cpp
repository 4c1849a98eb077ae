// Negative tests: hand-broken plans are rejected, under the right rule, with a message that names
// the step, signal or region at fault.
#include <gtest/gtest.h>

#include "../support/plan_options.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "weft/plan/validation.hpp"

namespace weft {
namespace {

Step* find_step(Plan& plan, int rank, const std::string& label) {
  for (auto& step : plan.ranks[static_cast<size_t>(rank)].steps)
    if (step.label == label) return &step;
  return nullptr;
}

// Asserts that the report has an error under `rule` whose message contains every one of `words`.
void expect_error(const ValidationReport& report, const std::string& rule, const std::vector<std::string>& words) {
  for (const auto& e : report.errors) {
    if (e.rule != rule) continue;
    bool all = true;
    for (const auto& w : words) all = all && e.message.find(w) != std::string::npos;
    if (all) return;
  }
  ADD_FAILURE() << "no [" << rule << "] error mentioning all expected words in:\n" << report.summary();
}

Problem problem(OpKind op, int64_t m, int world) { return Problem{op, m, 16, 8, world, DType::bf16, DType::bf16, {}}; }
const PlanOptions kSmallTiles = testing_support::tiled(8, 8, Raster::along_m, 1);

TEST(Validation, BuiltPlansAreValid) {
  for (const auto& s : strategies())
    for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) {
      if (!s.supports(op)) continue;
      const auto report = validate_plan(s.build(problem(op, 16, 2), kSmallTiles));
      EXPECT_TRUE(report.ok()) << s.name << " " << to_string(op) << "\n" << report.summary();
    }
}

TEST(Validation, MissingNotifyIsADeadlockNamingTheSignal) {
  Plan plan = plan_decomposed(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  find_step(plan, 0, "pull shard 1")->notifies.clear();
  const auto report = validate_plan(plan);
  expect_error(report, "liveness", {"deadlock", "rank 0", "gemm shard 1", "shard1_arrived", ">= 1"});
  expect_error(report, "signals", {"shard1_arrived", "raised 0 time(s)"});
}

TEST(Validation, MissingWaitIsAReadBeforeItsSignal) {
  Plan plan = plan_decomposed(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  find_step(plan, 1, "gemm shard 0")->waits.clear();
  const auto report = validate_plan(plan);
  expect_error(report, "ordering", {"race", "gemm shard 0", "pull shard 0", "A_gathered@1"});
  expect_error(report, "signals", {"shard0_arrived", "never awaited"});
}

TEST(Validation, CrossRankSignalCycleIsADeadlock) {
  Plan plan;
  plan.strategy = "broken";
  plan.problem = problem(OpKind::gemm_ar, 8, 2);
  for (int r = 0; r < 2; ++r) {
    RankPlan rp;
    rp.rank = r;
    rp.buffers.push_back({"C", BufferRole::output, 8, 16, DType::bf16, true});
    rp.buffers.push_back({"X", BufferRole::input, 8, 16, DType::bf16, true});
    rp.signals = {"go"};
    rp.output = {r, 0, {0, 0, 8, 16}};
    Step first{"wait for peer", 0, Engine::sm, {{{r, 0}, 1}}, {}, JoinStep{}};
    Step second{"copy and tell peer", 0, Engine::copy_engine, {}, {{{1 - r, 0}, 1}},
                CopyStep{{r, 1, {0, 0, 8, 16}}, {r, 0, {0, 0, 8, 16}}}};
    rp.steps = {first, second};
    plan.ranks.push_back(rp);
  }
  const auto report = validate_plan(plan);
  expect_error(report, "liveness", {"deadlock", "rank 0", "wait for peer", "'go'"});
  expect_error(report, "liveness", {"deadlock", "rank 1", "wait for peer"});
}

TEST(Validation, CollectivesInDifferentOrdersDeadlock) {
  Plan plan = plan_decomposed(problem(OpKind::gemm_ar, 16, 2), kSmallTiles);
  auto& steps = plan.ranks[1].steps;
  // Rank 1 issues all_reduce chunk 1 before chunk 0 on its communication stream.
  std::vector<size_t> at;
  for (size_t i = 0; i < steps.size(); ++i)
    if (std::holds_alternative<CollectiveStep>(steps[i].body)) at.push_back(i);
  ASSERT_EQ(at.size(), 2u);
  std::swap(steps[at[0]], steps[at[1]]);
  expect_error(validate_plan(plan), "liveness", {"deadlock", "collective #"});
}

TEST(Validation, DoublyWrittenRegionIsRejected) {
  Plan plan = plan_sequential(problem(OpKind::gemm_ar, 16, 2), kSmallTiles);
  auto& gemm = std::get<GemmStep>(find_step(plan, 0, "gemm")->body);
  gemm.tiles.push_back(gemm.tiles.front());
  const auto report = validate_plan(plan);
  expect_error(report, "coverage", {"C@0", "produced 2 times"});
  expect_error(report, "ordering", {"race", "both write", "tile 0"});
}

TEST(Validation, AGemmStoringIntoMoreBuffersThanTheOverlapGemmHoldsIsRejected) {
  // Fused gemm_rs at world 8 stores into 7 peers' slots and C and reads its own slots: 9 buffers,
  // within the limit. Tiles of one rank spread over kMaxGemmTileTargets + 1 buffers are not.
  Problem p{OpKind::gemm_rs, 8 * 64, 96, 32, 8, DType::bf16, DType::bf16, {}};
  Plan plan = plan_fused(p, testing_support::tiled(64, 32, Raster::along_m, 1));
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  RankPlan& rank = plan.ranks[0];
  auto* gemm = std::get_if<GemmStep>(&rank.steps.front().body);
  ASSERT_NE(gemm, nullptr);
  ASSERT_GT(gemm->tiles.size(), static_cast<size_t>(kMaxGemmTileTargets));
  for (size_t i = 0; i <= static_cast<size_t>(kMaxGemmTileTargets); ++i) {
    GemmTile& t = gemm->tiles[i];
    rank.buffers.push_back(BufferDecl{"extra" + std::to_string(i), BufferRole::scratch, 64, 64, DType::bf16, false});
    t.store = Region{0, static_cast<BufferId>(rank.buffers.size() - 1), Rect{0, 0, t.tile.rows, t.tile.cols}};
  }
  const ValidationReport report = validate_plan(plan);
  EXPECT_TRUE(report.has("structure")) << report.summary();
  EXPECT_NE(report.summary().find("overlap GEMM holds"), std::string::npos) << report.summary();
}

// A kernel on every SM whose tiles wait for a counter that a copy within one GPU raises from another
// stream: the copy runs as a kernel and finds no SM free. A copy from a peer on the copy engine,
// or a kernel that leaves SMs, is fine.
TEST(Validation, AKernelHoldingEverySmMayNotWaitForALocalCopy) {
  Problem p;
  p.op = OpKind::ag_attention;
  p.m = 16;
  p.world_size = 2;
  p.batch = 1;
  p.heads = 2;
  p.kv_heads = 1;
  p.head_dim = 8;
  PlanOptions o = kSmallTiles;
  Plan plan = plan_tilelink(p, o);
  EXPECT_FALSE(validate_plan(plan).has("sm_holding")) << validate_plan(plan).summary();
  Step* pull = find_step(plan, 0, "pull K of rank 1 tile 0");
  ASSERT_NE(pull, nullptr);
  std::get<CopyStep>(pull->body).src.rank = 0;  // now a copy within rank 0's GPU
  expect_error(validate_plan(plan), "sm_holding", {"rank 0", "holds every SM", "pull K of rank 1 tile 0", "a copy within one GPU"});
  for (Step& s : plan.ranks[0].steps)
    if (auto* attention = std::get_if<AttentionStep>(&s.body)) attention->sm_limit = 100;
  EXPECT_FALSE(validate_plan(plan).has("sm_holding")) << "the kernel leaves SMs to the copy";

  // Peer pulls on the copy engine raise their counter with a stream write where one stream alone
  // raises it; from two streams the raise is a kernel (signal_add), which needs an SM.
  Plan two_writers = plan_tilelink(p, o);
  Step* v_pull = find_step(two_writers, 0, "pull V of rank 1 tile 0");
  ASSERT_NE(v_pull, nullptr);
  v_pull->stream = 2;
  two_writers.ranks[0].stream_count = 3;
  expect_error(validate_plan(two_writers), "sm_holding", {"rank 0", "pull K of rank 1 tile 0", "raised by a kernel"});

  // fused ag_gemm: tiles wait for the copy engine's pulls from peers; a pull made local is refused.
  Plan fused = plan_fused(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  ASSERT_TRUE(validate_plan(fused).ok()) << validate_plan(fused).summary();
  for (Step& s : fused.ranks[1].steps)
    if (auto* copy = std::get_if<CopyStep>(&s.body); copy && s.engine == Engine::copy_engine && !s.notifies.empty()) copy->src.rank = 1;
  expect_error(validate_plan(fused), "sm_holding", {"rank 1", "holds every SM", "a copy within one GPU"});
}

TEST(Validation, MissingTileLeavesOutputUnwritten) {
  Plan plan = plan_sequential(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  std::get<GemmStep>(find_step(plan, 1, "gemm")->body).tiles.pop_back();
  expect_error(validate_plan(plan), "coverage", {"C@1", "produced 0 times"});
}

TEST(Validation, SurplusNotifyBreaksTheEpoch) {
  Plan plan = plan_decomposed(problem(OpKind::gemm_rs, 16, 2), kSmallTiles);
  auto* gemm = find_step(plan, 0, "gemm rows of rank 1");
  gemm->notifies.push_back(gemm->notifies.front());
  expect_error(validate_plan(plan), "signals", {"partial_for1_ready", "raised 2 time(s)", "expects 1", "epoch"});
}

TEST(Validation, OutputArrivingAfterTheRankEndsIsRejected) {
  Problem p = problem(OpKind::gemm_a2a, 6, 2);
  p.routing = {{1, 1, 0, 1, 0, 1}, {0, 0, 1, 0, 1, 1}};
  Plan plan = plan_decomposed(p, kSmallTiles);
  auto& steps = plan.ranks[1].steps;
  std::erase_if(steps, [](const Step& s) { return std::holds_alternative<JoinStep>(s.body); });
  const auto report = validate_plan(plan);
  expect_error(report, "coverage", {"push rows to rank 1", "rank 1 may end before"});
}

TEST(Validation, WritingAnInputIsRejected) {
  Plan plan = plan_sequential(problem(OpKind::gemm_ar, 16, 1), kSmallTiles);
  auto& gemm = std::get<GemmStep>(find_step(plan, 0, "gemm")->body);
  gemm.tiles[0].store.buffer = find_buffer(plan.ranks[0], "A");
  gemm.tiles[0].store.box.cols = std::min<int64_t>(gemm.tiles[0].store.box.cols, 8);
  gemm.tiles[0].tile.cols = gemm.tiles[0].store.box.cols;
  expect_error(validate_plan(plan), "ordering", {"writes", "input buffer 'A'"});
}

TEST(Validation, PeerAccessNeedsSymmetricBuffers) {
  Plan plan = plan_decomposed(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  for (auto& rp : plan.ranks) rp.buffers[static_cast<size_t>(find_buffer(rp, "A"))].symmetric = false;
  expect_error(validate_plan(plan), "structure", {"pull shard 1", "not symmetric"});
}

TEST(Validation, WaitOnAPeersSignalIsRejected) {
  Plan plan = plan_decomposed(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  find_step(plan, 0, "gemm shard 1")->waits[0].signal.rank = 1;
  expect_error(validate_plan(plan), "structure", {"gemm shard 1", "waits must be local"});
}

TEST(Validation, RegionOutsideItsBufferIsRejected) {
  Plan plan = plan_sequential(problem(OpKind::gemm_ar, 16, 2), kSmallTiles);
  std::get<GemmStep>(find_step(plan, 1, "gemm")->body).tiles[0].store.box.row = 15;
  expect_error(validate_plan(plan), "structure", {"rank 1", "'gemm' tile 0", "outside buffer 'C'"});
}

TEST(Validation, CollectiveMissingOnOneRankIsRejected) {
  Plan plan = plan_sequential(problem(OpKind::gemm_ar, 16, 3), kSmallTiles);
  std::erase_if(plan.ranks[2].steps, [](const Step& s) { return std::holds_alternative<CollectiveStep>(s.body); });
  expect_error(validate_plan(plan), "structure", {"collective #0", "never joined by rank 2"});
}

TEST(Validation, AllToAllCountsMustAgree) {
  Problem p = problem(OpKind::gemm_a2a, 4, 2);
  p.routing = {{0, 1, 1, 0}, {1, 1, 0, 0}};
  Plan plan = plan_sequential(p, kSmallTiles);
  for (auto& step : plan.ranks[0].steps)
    if (auto* c = std::get_if<CollectiveStep>(&step.body)) {
      c->send_rows = {1, 3};
    }
  expect_error(validate_plan(plan), "structure", {"collective #0", "rank 0 sends 3 rows to rank 1"});
}

TEST(Validation, SymmetricBuffersMustMatchAcrossRanks) {
  Plan plan = plan_decomposed(problem(OpKind::gemm_rs, 16, 2), kSmallTiles);
  plan.ranks[1].buffers[static_cast<size_t>(find_buffer(plan.ranks[1], "received"))].rows = 8;
  expect_error(validate_plan(plan), "structure", {"rank 1", "symmetric buffer 'received'", "not declared identically"});
}

TEST(Validation, RequireValidThrowsWithTheSummary) {
  Plan plan = plan_decomposed(problem(OpKind::ag_gemm, 16, 2), kSmallTiles);
  find_step(plan, 0, "pull shard 1")->notifies.clear();
  try {
    require_valid(plan);
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("[liveness]"), std::string::npos);
  }
}

TEST(GpuLoweringGate, TheExchangedProductRunsWhereTheOverlapGemmHasIt) {
  // sequential's GEMM at m = 200 on C tiles of 96x128 (kernel tiles 128x96), exchanged: lowers.
  PlanOptions o;
  o.tile_m = 96;
  o.tile_n = 128;
  const Problem p{OpKind::gemm_ar, 200, 700, 256, 1, DType::bf16, DType::bf16, {}};
  Plan plan = make_plan(find_strategy("sequential"), p, o);
  GemmStep* gemm = nullptr;
  for (Step& step : plan.ranks.at(0).steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) gemm = g;
  ASSERT_NE(gemm, nullptr);
  gemm->exchanged = true;
  EXPECT_FALSE(gpu_lowering_gap(plan, {true}));
  // Tiles of C the kernel has no exchanged instantiation for.
  gemm->tile_m = 64;
  const auto gap = gpu_lowering_gap(plan, {true});
  ASSERT_TRUE(gap);
  EXPECT_NE(gap->find("64x128 tiles of C"), std::string::npos) << *gap;
  // A tile reading its A rows in place.
  gemm->tile_m = 96;
  gemm->tiles.front().a_rows = gemm->a;
  const auto in_place = gpu_lowering_gap(plan, {true});
  ASSERT_TRUE(in_place);
  EXPECT_NE(in_place->find("reads its A rows in place"), std::string::npos) << *in_place;
}

TEST(GpuLoweringGate, ClustersRunWhereTheOverlapGemmHasThem) {
  // sequential's GEMM at m = 256 on 128x128 tiles in clusters of 2x1: lowers.
  PlanOptions o;
  o.tile_m = 128;
  o.tile_n = 128;
  const Problem p{OpKind::gemm_ar, 256, 512, 256, 1, DType::bf16, DType::bf16, {}};
  Plan plan = make_plan(find_strategy("sequential"), p, o);
  GemmStep* gemm = nullptr;
  for (Step& step : plan.ranks.at(0).steps)
    if (auto* g = std::get_if<GemmStep>(&step.body)) gemm = g;
  ASSERT_NE(gemm, nullptr);
  gemm->cluster_m = 2;
  EXPECT_FALSE(gpu_lowering_gap(plan, {true}));
  auto gap_names = [&](const std::string& words) {
    const auto gap = gpu_lowering_gap(plan, {true});
    ASSERT_TRUE(gap) << words;
    EXPECT_NE(gap->find(words), std::string::npos) << *gap;
  };
  gemm->k_splits = 2;  // split in step on the whole GPU: lowers; beside other kernels' SMs: refused
  EXPECT_FALSE(gpu_lowering_gap(plan, {true}));
  gemm->sm_limit = 100;
  gap_names("need the whole GPU");
  gemm->sm_limit = 0;
  gemm->k_splits = 1;
  // Clusters of four and eight on 128x128: lower; on 128x256, or shapes not compiled: refused.
  for (auto [cm, cn] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}}) {
    gemm->cluster_m = cm, gemm->cluster_n = cn;
    EXPECT_FALSE(gpu_lowering_gap(plan, {true})) << cm << "x" << cn;
  }
  gemm->tile_n = 256;
  gap_names("clusters of four and eight are compiled for 128x128 only");
  gemm->tile_n = 128;
  gemm->cluster_m = 4, gemm->cluster_n = 4;
  gap_names("2x1, 1x2, 2x2, 2x4 and 4x2 only");
  gemm->cluster_m = 2, gemm->cluster_n = 1;
  gemm->tile_n = 192;
  gap_names("128x128 and 128x256 only");
  gemm->tile_n = 128;
  gemm->tail_splits = 2;
  gap_names("tail splits or stream-K");
  gemm->tail_splits = 1;
  gemm->exchanged = true;
  gap_names("compiled for C's 112x128 tiles in 2x1, 2x2 and 2x4 only");  // exchanged: on 128x128 tiles of C
  gemm->exchanged = false;
  gemm->tiles.front().wait = Wait{};
  gap_names("a tile waits");
}

}  // namespace
}  // namespace weft
