// auto and the tuning table (plan/auto.hpp, model/tuning_table.hpp): the table's JSON and nearest
// shape, and the rules auto chooses by.
#include <map>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "weft/ir/topology.hpp"
#include "weft/model/ficco_heuristic.hpp"
#include "weft/model/shipped_defaults.hpp"
#include "weft/model/simulator.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/auto.hpp"

namespace weft {
namespace {

TuningTable table_with(const std::vector<TunedCandidate>& candidates, int64_t m = 8192, int64_t n = 4096, int64_t k = 2752) {
  TuningTable t;
  t.machine = "test";
  TuningEntry e;
  e.op = OpKind::gemm_rs;
  e.world = 4;
  e.m = m;
  e.n = n;
  e.k = k;
  e.source = "a test";
  e.candidates = candidates;
  t.entries.push_back(e);
  return t;
}

TEST(TuningTable, ReadsWhatItWritesAndFindsTheNearestShape) {
  TuningTable t = table_with({{"sequential", {}, 0.43}, {"chunked", {{"template", "pull"}, {"chunks", "4"}, {"backend", "sm"}}, 0.30}});
  t.entries.push_back(table_with({{"sequential", {}, 1.7}}, 8192, 8192, 7168).entries[0]);
  EXPECT_EQ(parse_tuning_table(tuning_table_json(t)), t);
  double distance = 0;
  const Problem near{OpKind::gemm_rs, 8192, 4096, 3000, 4, DType::bf16, DType::bf16, {}};
  const TuningEntry* e = t.nearest(near, &distance);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->k, 2752);
  EXPECT_NEAR(distance, std::abs(std::log(3000.0 / 2752)), 1e-9);
  EXPECT_EQ(t.nearest(Problem{OpKind::gemm_rs, 8192, 4096, 2752, 2, DType::bf16, DType::bf16, {}}), nullptr) << "another world size";
  EXPECT_EQ(e->best()->strategy, "chunked");
  const PlanOptions o = apply_candidate(PlanOptions{}, *e->best());
  EXPECT_EQ(o.chunked.shape, ScheduleShape::pull);
  EXPECT_EQ(o.chunked.chunks, 4);
  EXPECT_EQ(o.chunked.backend, ChunkBackend::sm);
  EXPECT_THROW(apply_candidate(PlanOptions{}, TunedCandidate{"fused", {{"colour", "red"}}, 1}), std::invalid_argument);
  // comm_sms is the strategy's own: tilelink's companion CTAs, chunked's copy SMs.
  const PlanOptions tilelink = apply_candidate(PlanOptions{}, TunedCandidate{"tilelink", {{"comm_sms", "32"}}, 1});
  EXPECT_EQ(tilelink.tilelink.comm_sms, 32);
  EXPECT_EQ(tilelink.chunked.comm_sms, PlanOptions{}.chunked.comm_sms);
  EXPECT_EQ(apply_candidate(PlanOptions{}, TunedCandidate{"chunked", {{"comm_sms", "24"}}, 1}).chunked.comm_sms, 24);
  EXPECT_THROW(parse_tuning_table(R"({"entries": [{"op": "gemm_rs", "world": 0, "m": 1, "n": 1, "k": 1, "candidates": []}]})"),
               std::invalid_argument);
}

// MoE rows of one m, n and k differ by experts and topk (TileLink's MoE-1/2/3): an entry stands for
// its own experts and topk, nearest in log space among those, and one that does not say for none.
TEST(TuningTable, MoeEntriesAreFoundByTheirExpertsAndTopk) {
  auto moe_entry = [](int experts, int topk, const std::string& best) {
    TuningEntry e;
    e.op = OpKind::moe_rs;
    e.world = 4;
    e.m = 2048;
    e.n = 2048;
    e.k = 384;
    e.experts = experts;
    e.topk = topk;
    e.candidates = {{"sequential", {}, 1.0}, {best, {}, best == "sequential" ? 0.0 : 0.5}};
    return e;
  };
  TuningTable t;
  t.entries = {moe_entry(8, 2, "sequential"), moe_entry(32, 2, "tilelink"), moe_entry(32, 5, "tilelink")};
  EXPECT_EQ(parse_tuning_table(tuning_table_json(t)), t) << "experts and topk are written and read";
  Problem p{OpKind::moe_rs, 2048, 2048, 384, 4, DType::bf16, DType::bf16, {}};
  p.experts = 8;
  p.topk = 2;
  double distance = 1;
  ASSERT_NE(t.nearest(p, &distance), nullptr);
  EXPECT_EQ(t.nearest(p)->experts, 8);
  EXPECT_EQ(distance, 0);
  p.experts = 32;
  p.topk = 4;  // nearer 5 than 2 in log space
  EXPECT_EQ(t.nearest(p)->topk, 5);
  TuningTable legacy;
  legacy.entries = {moe_entry(0, 0, "tilelink")};
  EXPECT_EQ(legacy.nearest(p), nullptr) << "an MoE entry without experts and topk is no guide";
  EXPECT_THROW(parse_tuning_table(R"({"entries": [{"op": "moe_rs", "world": 2, "m": 1, "n": 1, "k": 1, "experts": 8, "candidates": []}]})"),
               std::invalid_argument);
}

Problem attention_problem(int64_t tokens, int heads, bool causal) {
  Problem p;
  p.op = OpKind::ag_attention;
  p.world_size = 4;
  p.m = tokens;
  p.batch = 1;
  p.heads = heads;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.causal = causal;
  return p;
}

TuningEntry attention_entry(int64_t tokens, int heads, bool causal, std::vector<TunedCandidate> candidates) {
  TuningEntry e;
  e.op = OpKind::ag_attention;
  e.world = 4;
  e.m = tokens;
  e.batch = 1;
  e.heads = heads;
  e.kv_heads = 8;
  e.head_dim = 128;
  e.causal = causal;
  e.source = "a test";
  e.candidates = std::move(candidates);
  return e;
}

// An attention entry stands for the same heads, head dimension and masking at another length (its n
// and k are 0), and the file says its shape.
TEST(TuningTable, AttentionEntriesAreFoundByTheirHeadsAndMasking) {
  TuningTable t;
  t.entries = {attention_entry(4096, 32, true, {{"sequential", {}, 2.2}, {"decomposed", {}, 2.0}}),
               attention_entry(4096, 64, true, {{"sequential", {}, 4.4}, {"tilelink", {}, 4.0}}),
               attention_entry(8192, 32, false, {{"sequential", {}, 9.0}})};
  EXPECT_EQ(parse_tuning_table(tuning_table_json(t)), t);
  double distance = 0;
  const TuningEntry* e = t.nearest(attention_problem(8192, 32, true), &distance);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->m, 4096);
  EXPECT_EQ(e->heads, 32);
  EXPECT_TRUE(e->causal);
  EXPECT_NEAR(distance, std::log(2.0), 1e-9);
  EXPECT_EQ(t.nearest(attention_problem(4096, 64, false)), nullptr) << "no non-causal 64-head entry";
  EXPECT_THROW(parse_tuning_table(R"({"entries": [{"op": "ag_attention", "world": 4, "m": 4096, "n": 0, "k": 0, "candidates": []}]})"),
               std::invalid_argument)
      << "an attention entry without its heads";
  EXPECT_THROW(parse_tuning_table(R"({"entries": [{"op": "gemm_rs", "world": 4, "m": 1, "n": 1, "k": 1, "heads": 8, "candidates": []}]})"),
               std::invalid_argument)
      << "heads on a GEMM entry";
  // A measured entry decides for auto, over its fallback for attention.
  PlanOptions o;
  o.tuning = std::make_shared<const TuningTable>(t);
  const AutoChoice c = choose_strategy(attention_problem(4096, 32, true), o);
  EXPECT_EQ(c.candidate.strategy, "decomposed") << c.reason;
  EXPECT_NE(c.reason.find("measured"), std::string::npos) << c.reason;
}

// weft tune --from-results and --strategy merge into a table: the remeasured candidates replace theirs,
// the others (a tuned knob) stay; shapes that differ only in an attention field are entries of their own.
TEST(TuningTable, MergingKeepsWhatTheNewEntryDoesNotMeasure) {
  TuningTable t;
  TuningEntry gemm;
  gemm.op = OpKind::gemm_rs;
  gemm.world = 2;
  gemm.m = 4096, gemm.n = 7168, gemm.k = 4096;
  gemm.candidates = {{"sequential", {}, 1.0}, {"tilelink", {{"comm_sms", "16"}}, 0.8}, {"decomposed", {}, 0.9}};
  merge_entry(t, gemm);
  TuningEntry again = gemm;
  again.candidates = {{"sequential", {}, 1.1}, {"decomposed", {}, 0.85}, {"fused", {}, 0.95}};
  merge_entry(t, again);
  ASSERT_EQ(t.entries.size(), 1u);
  std::map<std::string, double> ms;
  for (const TunedCandidate& c : t.entries[0].candidates) ms[c.strategy + (c.options.empty() ? "" : "/tuned")] = c.ms;
  EXPECT_EQ(ms, (std::map<std::string, double>{{"sequential", 1.1}, {"decomposed", 0.85}, {"fused", 0.95}, {"tilelink/tuned", 0.8}}));
  merge_entry(t, attention_entry(4096, 32, true, {{"sequential", {}, 2.2}}));
  merge_entry(t, attention_entry(4096, 64, true, {{"sequential", {}, 4.4}}));
  merge_entry(t, attention_entry(4096, 32, false, {{"sequential", {}, 2.4}}));
  merge_entry(t, attention_entry(4096, 32, true, {{"tilelink", {}, 2.0}}));
  ASSERT_EQ(t.entries.size(), 4u);
  EXPECT_EQ(t.entries[1].candidates.size(), 2u) << "the causal 32-head entry: sequential kept, tilelink added";
}

// FP8 entries (weft bench --dtype e4m3) stand for FP8 calls of their scaling mode alone, and bf16
// entries for bf16 calls: an FP8 GEMM runs at about twice bf16's rate, and cuBLASLt's row-scaled FP8
// matmul ranks the strategies otherwise than its tensor-scaled one.
TEST(TuningTable, EntriesStandForTheirOwnDtypeAndScalingMode) {
  TuningTable t = table_with({{"sequential", {}, 0.43}, {"chunked", {}, 0.30}});
  TuningEntry row = table_with({{"sequential", {}, 0.36}, {"decomposed", {}, 0.28}}).entries[0];
  row.dtype = DType::e4m3;
  row.scaling = Scaling::row;
  t.entries.push_back(row);
  EXPECT_EQ(parse_tuning_table(tuning_table_json(t)), t) << "dtype and scaling are written and read";
  EXPECT_EQ(tuning_table_json(t).find("\"dtype\": \"bf16\""), std::string::npos) << "a bf16 entry writes no dtype (older tables read alike)";
  Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::bf16, DType::bf16, {}};
  ASSERT_NE(t.nearest(p), nullptr);
  EXPECT_EQ(t.nearest(p)->best()->strategy, "chunked") << "bf16 call: the bf16 entry";
  p.input_dtype = DType::e4m3;
  p.scaling = Scaling::row;
  double distance = 1;
  ASSERT_NE(t.nearest(p, &distance), nullptr);
  EXPECT_EQ(t.nearest(p)->best()->strategy, "decomposed") << "FP8 call: the FP8 entry, though the bf16 one has the same shape";
  EXPECT_EQ(distance, 0);
  p.scaling = Scaling::tensor;
  EXPECT_EQ(t.nearest(p), nullptr) << "tensor scales: the row-scaled entry is no guide";
  TuningEntry tensor = row;
  tensor.scaling = Scaling::tensor;
  tensor.k = 3000;
  t.entries.push_back(tensor);
  ASSERT_NE(t.nearest(p), nullptr);
  EXPECT_EQ(t.nearest(p)->scaling, Scaling::tensor);
  p.scaling = Scaling::row;
  EXPECT_EQ(t.nearest(p)->k, 2752) << "row scales: the row entry, not the tensor one";
  // Merging keeps the dtypes and modes apart.
  merge_entry(t, row);
  tensor.k = 2752;
  merge_entry(t, tensor);
  EXPECT_EQ(t.entries.size(), 4u);
  // The reader refuses what no weft bench wrote.
  for (const char* bad : {R"("dtype": "e4m3")", R"("dtype": "e4m3", "scaling": "block")", R"("dtype": "bf16", "scaling": "row")",
                          R"("scaling": "tensor")", R"("dtype": "f32")"}) {
    const std::string text = std::string(R"({"entries": [{"op": "gemm_rs", "world": 2, "m": 1, "n": 1, "k": 1, )") + bad + R"(, "candidates": []}]})";
    EXPECT_THROW(parse_tuning_table(text), std::invalid_argument) << bad;
  }
}

TEST(Auto, AWorldOfOneRunsSequential) {
  const AutoChoice c = choose_strategy(Problem{OpKind::ag_gemm, 8192, 4096, 4096, 1, DType::bf16, DType::bf16, {}}, PlanOptions{});
  EXPECT_EQ(c.candidate.strategy, "sequential");
}

TEST(Auto, AttentionTakesTilelinkWhereItRunsAndNoEntryIsMeasured) {
  Problem p;
  p.op = OpKind::ag_attention;
  p.world_size = 4;
  p.m = 4096;
  p.batch = 1;
  p.heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  for (const bool causal : {false, true}) {
    p.causal = causal;
    PlanOptions o;
    use_default_auto_inputs(o);
    const AutoChoice c = choose_strategy(p, o);
    EXPECT_EQ(c.candidate.strategy, "tilelink") << c.reason;
    EXPECT_NE(c.reason.find("attention"), std::string::npos) << c.reason;
    EXPECT_EQ(plan_auto(p, o).strategy, "auto=tilelink");
  }
  // Where tilelink cannot reach its peers (no load/store between the ranks), the candidates are
  // judged as before and sequential runs.
  PlanOptions nccl_only;
  nccl_only.topology = Topology::no_load_store(4);
  EXPECT_EQ(choose_strategy(p, nccl_only).candidate.strategy, "sequential");
  // A world of one is the kernel alone.
  p.world_size = 1;
  EXPECT_EQ(choose_strategy(p, PlanOptions{}).candidate.strategy, "sequential");
}

TEST(Auto, AMeasuredShapeNearbyDecidesAndItsKnobsComeAlong) {
  const Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.tuning = std::make_shared<const TuningTable>(
      table_with({{"sequential", {}, 0.43}, {"decomposed", {}, 0.33}, {"chunked", {{"template", "pull"}, {"chunks", "3"}}, 0.30}}));
  const AutoChoice c = choose_strategy(p, o);
  EXPECT_EQ(c.candidate.strategy, "chunked");
  EXPECT_EQ(c.options.chunked.chunks, 3);
  EXPECT_NE(c.reason.find("measured"), std::string::npos) << c.reason;
  // The plan auto builds is that one, knobs included; and chunked asked for by name reads its knobs too.
  const Plan plan = plan_auto(p, o);
  EXPECT_EQ(plan.strategy, "auto=chunked");
  EXPECT_EQ(resolve_options(find_strategy("chunked"), p, o).chunked.shape, ScheduleShape::pull);
}

// An FP8 call is chosen by the FP8 entries (its overlap GEMM runs at ~0.7 of cuBLASLt's FP8 matmul,
// where bf16's runs at ~1.0: the bf16 ranking would pick the overlap-GEMM strategies), as the op runs
// it: only plans the CUDA executor lowers.
TEST(Auto, AnFp8CallIsChosenByTheFp8EntriesNotTheBf16Ones) {
  Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::e4m3, DType::bf16, {}};
  p.scaling = Scaling::row;
  TuningTable t = table_with({{"sequential", {}, 0.43}, {"decomposed", {}, 0.33}, {"chunked", {}, 0.30}});
  TuningEntry fp8 = table_with({{"sequential", {}, 0.363}, {"decomposed", {}, 0.285}, {"chunked", {}, 0.418}}).entries[0];
  fp8.dtype = DType::e4m3;
  fp8.scaling = Scaling::row;
  t.entries.push_back(fp8);
  PlanOptions o;
  o.gpu_lowerable_only = true;
  o.topology = Topology::single_node(4);
  o.tuning = std::make_shared<const TuningTable>(t);
  const AutoChoice c = choose_strategy(p, o);
  EXPECT_EQ(c.candidate.strategy, "decomposed") << c.reason;
  EXPECT_NE(c.reason.find("measured"), std::string::npos) << c.reason;
  // The same call in bf16 (which the op plans without gpu_lowerable_only) takes the bf16 entry's pick.
  p.input_dtype = DType::bf16;
  p.scaling = Scaling::none;
  o.gpu_lowerable_only = false;
  const AutoChoice bf16 = choose_strategy(p, o);
  EXPECT_EQ(bf16.candidate.strategy, "chunked") << bf16.reason;
}

// Where no entry stands for an FP8 call, the simulator's prediction is corrected by the FP8 rows'
// accuracy (MachineProfile::fp8_prediction_accuracy), not bf16's: FP8 strategies miss their
// predictions otherwise than bf16 ones.
TEST(Auto, AnFp8CallIsPredictedWithTheFp8RowsAccuracy) {
  Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::e4m3, DType::bf16, {}};
  p.scaling = Scaling::row;
  PlanOptions o;
  use_default_auto_inputs(o);
  o.tuning = nullptr;  // the simulator alone
  o.gpu_lowerable_only = true;
  o.topology = Topology::single_node(4);
  o.machine.fp8_prediction_accuracy.clear();
  const AutoChoice with_bf16s = choose_strategy(p, o);
  EXPECT_EQ(with_bf16s.candidate.strategy, "chunked") << with_bf16s.reason << " (the premise: bf16's accuracy trusts chunked here)";
  // Chunked's FP8 rows ran 1.55x their predictions, and nothing else is trusted faster.
  for (const std::string& name : auto_candidates(OpKind::gemm_rs)) o.machine.fp8_prediction_accuracy[name] = {0.0, 0.5};
  o.machine.fp8_prediction_accuracy["chunked"] = {-0.355, 0.355};
  const AutoChoice with_fp8s = choose_strategy(p, o);
  EXPECT_EQ(with_fp8s.candidate.strategy, "sequential") << with_fp8s.reason;
  // A bf16 call is judged by bf16's accuracy still.
  p.input_dtype = DType::bf16;
  p.scaling = Scaling::none;
  o.gpu_lowerable_only = false;
  PlanOptions without = o;
  without.machine.fp8_prediction_accuracy.clear();
  EXPECT_EQ(choose_strategy(p, o).candidate.strategy, choose_strategy(p, without).candidate.strategy);
  // The profile writes and reads it.
  EXPECT_EQ(parse_machine_profile(machine_profile_json(o.machine)).fp8_prediction_accuracy, o.machine.fp8_prediction_accuracy);
}

// weft bench records ficco under the schedule its heuristic picked ("ficco=S" -> ficco_S): that row
// is ficco's measurement, not a prediction that could outrank the other candidates' measurements.
TEST(Auto, FiccoIsMeasuredUnderTheScheduleItsHeuristicPicks) {
  const Problem p{OpKind::ag_gemm, 2048, 2752, 4096, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  use_default_auto_inputs(o);
  const std::string pick = "ficco_" + std::string(to_string(pick_ficco_schedule(p, o.machine).schedule));
  TuningTable t;
  TuningEntry e;
  e.op = OpKind::ag_gemm;
  e.world = 4;
  e.m = p.m, e.n = p.n, e.k = p.k;
  e.candidates = {{"sequential", {}, 1.0}, {"decomposed", {}, 0.9}, {"fused", {}, 1.1}, {"chunked", {}, 1.1}, {pick, {}, 0.8}};
  t.entries.push_back(e);
  o.tuning = std::make_shared<const TuningTable>(t);
  AutoChoice c = choose_strategy(p, o);
  EXPECT_EQ(c.candidate.strategy, pick) << c.reason;
  EXPECT_EQ(c.reason.rfind("measured", 0), 0u) << c.reason;
  // Slower where measured: ficco is not predicted past decomposed's measurement.
  t.entries[0].candidates.back().ms = 1.2;
  o.tuning = std::make_shared<const TuningTable>(t);
  c = choose_strategy(p, o);
  EXPECT_EQ(c.candidate.strategy, "decomposed") << c.reason;
}

TEST(Auto, NothingMeasuredOrTrustedFasterMeansSequential) {
  const Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  // Measured: every candidate there was slower than sequential, and the predictions are not trusted
  // beyond a 100% error.
  o.tuning = std::make_shared<const TuningTable>(table_with({{"sequential", {}, 0.30}, {"decomposed", {}, 0.33}, {"fused", {}, 0.31},
                                                             {"signal", {}, 0.40}, {"chunked", {}, 0.35}}));
  for (const std::string& name : auto_candidates()) o.machine.prediction_accuracy[name] = {0.0, 1.0};
  EXPECT_EQ(choose_strategy(p, o).candidate.strategy, "sequential");
  // With no table and trusted predictions, the simulator's pick: MLP-1's ReduceScatter overlaps.
  PlanOptions predicted;
  const AutoChoice c = choose_strategy(p, predicted);
  EXPECT_NE(c.candidate.strategy, "sequential") << c.reason;
  EXPECT_NE(c.reason.find("predicted"), std::string::npos) << c.reason;
  // A far-away measured shape does not stand for this one.
  PlanOptions far;
  far.tuning = std::make_shared<const TuningTable>(table_with({{"sequential", {}, 0.1}, {"decomposed", {}, 0.5}}, 64, 64, 64));
  EXPECT_EQ(choose_strategy(p, far).reason.find("measured"), std::string::npos);
}


// A predicted gain counts beyond twice the strategy's recorded error: with every candidate's error
// three quarters of the largest predicted gain, one error's worth would let the best through; twice
// does not.
TEST(Auto, APredictedGainCountsBeyondTwiceTheRecordedError) {
  const Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::bf16, DType::bf16, {}};
  const PlanOptions plain;
  const double sequential = simulate(make_plan(find_strategy("sequential"), p, plain), plain.machine).seconds;
  double largest_gain = 0;
  for (const std::string& name : auto_candidates()) {
    if (name == "sequential") continue;
    try {
      const double mine = simulate(make_plan(find_strategy(name), p, plain), plain.machine).seconds;
      largest_gain = std::max(largest_gain, 1 - mine / sequential);
    } catch (const std::invalid_argument&) {
    }
  }
  ASSERT_GT(largest_gain, 0.1) << "MLP-1's ReduceScatter is predicted to overlap";
  PlanOptions o;
  for (const std::string& name : auto_candidates()) o.machine.prediction_accuracy[name] = {0.0, 0.75 * largest_gain};
  const AutoChoice c = choose_strategy(p, o);
  EXPECT_EQ(c.candidate.strategy, "sequential") << c.reason;
  for (const std::string& name : auto_candidates()) o.machine.prediction_accuracy[name] = {0.0, 0.45 * largest_gain};
  EXPECT_NE(choose_strategy(p, o).candidate.strategy, "sequential") << "below half the gain, the error lets it count";
}

// The profile and table compiled into the library are the repository's measured files, and auto's
// defaults are those where the environment names no other (the CI environment names none).
TEST(ShippedDefaults, AreTheMeasuredH200ProfileAndTuningTable) {
  EXPECT_EQ(shipped_machine_profile(), load_machine_profile(std::string(WEFT_BENCH_DIR) + "/machines/h200.json"));
  ASSERT_TRUE(shipped_tuning_table());
  EXPECT_EQ(*shipped_tuning_table(), load_tuning_table(std::string(WEFT_BENCH_DIR) + "/tuning/h200.json"));
  EXPECT_FALSE(shipped_tuning_table()->entries.empty());
  EXPECT_FALSE(shipped_machine_profile().prediction_accuracy.empty()) << "the fitted profile carries its errors";
  if (!std::getenv("WEFT_MACHINE_PROFILE")) EXPECT_EQ(default_machine_profile(), shipped_machine_profile());
  if (!std::getenv("WEFT_TUNING_TABLE") && !std::getenv("WEFT_MACHINE_PROFILE")) EXPECT_EQ(default_tuning_table(), shipped_tuning_table());
}

}  // namespace
}  // namespace weft
