// The simulator (model/simulator.hpp): what it predicts follows from the plan and the profile (a
// sequential call is its GEMM then its collective; overlap hides communication; a GEMM holding every
// SM keeps NCCL out), a plan that would hang is reported, worlds no machine here has are predicted,
// and its trace is Chrome/Perfetto JSON.
#include <gtest/gtest.h>

#include "common/json.hpp"
#include "weft/model/simulator.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"

namespace weft {
namespace {

MachineProfile profile() {
  MachineProfile m;  // H200 defaults
  return m;
}

double predict(const std::string& strategy, const Problem& p, const MachineProfile& m = profile()) {
  PlanOptions o;
  o.machine = m;
  return simulate(make_plan(find_strategy(strategy), p, o), m).seconds;
}

TEST(Simulator, ASequentialCallIsItsGemmThenItsCollective) {
  const MachineProfile m = profile();
  const Problem p{OpKind::gemm_ar, 8192, 8192, 4096, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.machine = m;
  const Plan plan = plan_sequential(p, o);
  const Simulation whole = simulate(plan, m);
  const double gemm = simulate(steps_of_kind(plan, StepKind::gemm), m).seconds;
  const double comm = simulate(steps_of_kind(plan, StepKind::collective), m).seconds;
  EXPECT_TRUE(whole.stuck.empty()) << whole.stuck;
  EXPECT_NEAR(whole.seconds, gemm + comm, 0.05 * whole.seconds) << "one stream: the collective waits for the GEMM";
  // The GEMM: 2 M N K FLOP at about the profile's rate.
  const double ideal = 2.0 * 8192 * 8192 * 4096 / (m.peak_flops * m.gemm_efficiency);
  EXPECT_GT(gemm, ideal);
  EXPECT_LT(gemm, 1.3 * ideal);
  // The collective: the profile's curve.
  EXPECT_NEAR(comm, m.collective_seconds(CollectiveKind::all_reduce, 4, 8192.0 * 8192 * 2), 0.2 * comm);
  ASSERT_EQ(whole.rank_seconds.size(), 4u);
  EXPECT_EQ(whole.steps.size(), 8u) << "two steps on each of four ranks";
}

TEST(Simulator, ALibraryGemmWithFewerTilesThanSmsRunsNearTheMachinesRate) {
  // One expert's GEMM of TileLink's MoE-2 at world 4 (about 512 rows x 384 x 2048): 8 tiles of
  // 128x256, measured about 6.7 us per expert GEMM on H200 with cuBLASLt's launch and set-up
  // (bench/results/2026-11-27g: 0.213 ms for 32 of them). Costed a tile per CTA it took 18 us; the
  // library splits K across the idle SMs, so it costs its FLOPs or its bytes at the machine's rate.
  const MachineProfile m = profile();
  const Problem p{OpKind::gemm_ar, 512, 384, 2048, 1, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.machine = m;
  const Plan plan = steps_of_kind(plan_sequential(p, o), StepKind::gemm);
  const double gemm = simulate(plan, m).seconds;
  const double flops = 2.0 * 512 * 384 * 2048 / (m.peak_flops * m.gemm_efficiency);
  const double bytes = 2.0 * (512.0 * 2048 + 384.0 * 2048 + 512.0 * 384) / m.memory_bytes_per_s;
  EXPECT_LT(gemm, std::max(flops, bytes) + 2 * (m.gemm_fixed_seconds + m.launch_seconds) + 1e-6);
  EXPECT_GE(gemm, std::max(flops, bytes));
  // A GEMM that fills the SMs keeps its waves: 8192 x 8192 x 4096 stays above its ideal (the test above).
}

TEST(Simulator, OverlapHidesCommunicationWhereThereIsSomeToHide) {
  // MLP-1 RS at world 4: the reduce-scatter is most of a GEMM's time; decomposed hides part of it.
  const Problem p{OpKind::gemm_rs, 8192, 4096, 2752, 4, DType::bf16, DType::bf16, {}};
  EXPECT_LT(predict("decomposed", p), 0.9 * predict("sequential", p));
  EXPECT_LT(predict("fused", p), predict("sequential", p));
}

TEST(Simulator, AGemmOnEverySmKeepsNcclOut) {
  // The same chunked AllReduce plan with its GEMM on every SM: NCCL's chunks cannot start before the
  // GEMM ends, so nothing overlaps and the call takes longer than with SMs left to NCCL.
  const MachineProfile m = profile();
  const Problem p{OpKind::gemm_ar, 8192, 8192, 4096, 4, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.machine = m;
  Plan plan = make_plan(find_strategy("chunked"), p, o);
  const double beside = simulate(plan, m).seconds;
  for (RankPlan& rp : plan.ranks)
    for (Step& s : rp.steps)
      if (auto* g = std::get_if<GemmStep>(&s.body)) g->sm_limit = 0;
  const double holding = simulate(plan, m).seconds;
  EXPECT_GT(holding, beside);
  const double sequential = predict("sequential", p, m);
  EXPECT_GT(holding, 0.95 * sequential) << "holding every SM, the chunks run after the GEMM, as in sequential";
}

TEST(Simulator, APlanThatWouldHangIsReported) {
  const Problem p{OpKind::gemm_ar, 256, 256, 256, 2, DType::bf16, DType::bf16, {}};
  Plan plan = plan_sequential(p, PlanOptions{});
  plan.ranks[1].signals.push_back("never_raised");
  plan.ranks[1].steps.back().waits.push_back(Wait{SignalRef{1, 0}, 1});
  const Simulation s = simulate(plan, profile());
  EXPECT_NE(s.stuck.find("never_raised"), std::string::npos) << s.stuck;
}

TEST(Simulator, PredictsWorldsNoMachineHereHas) {
  // Every rank of the world laid out and predicted: sequential is its GEMM then its AllGather (the
  // profile's curve at this world size); decomposed, every rank too, computes no less than the GEMM.
  const MachineProfile m = profile();
  for (int world : {8, 16, 64}) {
    const Problem p{OpKind::ag_gemm, 8192 / world, 12288 / world * 4, 4096, world, DType::bf16, DType::bf16, {}};
    PlanOptions o;
    o.machine = m;
    const Plan plan = plan_sequential(p, o);
    const Simulation whole = simulate(plan, m);
    EXPECT_TRUE(whole.stuck.empty()) << world << ": " << whole.stuck;
    EXPECT_EQ(whole.rank_seconds.size(), static_cast<size_t>(world));
    const double gemm = simulate(steps_of_kind(plan, StepKind::gemm), m).seconds;
    const double gather = m.collective_seconds(CollectiveKind::all_gather, world, static_cast<double>(p.m * p.k * 2));
    EXPECT_GT(gather, 0) << world;
    EXPECT_NEAR(whole.seconds, gemm + gather, 0.2 * whole.seconds) << world << ": the GEMM waits for the AllGather";
    const Simulation decomposed = simulate(make_plan(find_strategy("decomposed"), p, o), m);
    EXPECT_TRUE(decomposed.stuck.empty()) << world << ": " << decomposed.stuck;
    EXPECT_EQ(decomposed.rank_seconds.size(), static_cast<size_t>(world));
    EXPECT_GT(decomposed.seconds, 0.9 * gemm) << world;
  }
}

TEST(Simulator, ItsTraceIsChromeTraceJson) {
  const Problem p{OpKind::ag_gemm, 1024, 2048, 1024, 2, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  const Plan plan = make_plan(find_strategy("decomposed"), p, o);
  const Simulation s = simulate(plan, profile());
  const Json trace = Json::parse(chrome_trace(plan, s));
  int slices = 0, names = 0;
  for (const Json& e : trace["traceEvents"].items()) {
    const std::string phase = e["ph"].text();
    if (phase == "X") {
      ++slices;
      EXPECT_GE(e["dur"].number(), 0);
      EXPECT_GE(e["ts"].number(), 0);
      EXPECT_FALSE(e["name"].text().empty());
    } else if (phase == "M") {
      ++names;
    }
  }
  size_t steps = 0;
  for (const RankPlan& rp : plan.ranks) steps += rp.steps.size();
  EXPECT_EQ(static_cast<size_t>(slices), steps);
  EXPECT_EQ(names, 2) << "a process name per rank";
  EXPECT_NEAR(trace["otherData"]["predicted_ms"].number(), s.seconds * 1e3, 1e-4 * s.seconds * 1e3) << "JSON keeps 6 digits";
}

// An integer field beyond 2^63 has no int64 value: converting it would be undefined behaviour.
// Nesting is bounded, so that a hostile file cannot overflow the parser's stack.
TEST(Json, NestingIsBounded) {
  EXPECT_NO_THROW(Json::parse(std::string(100, '[') + std::string(100, ']')));
  EXPECT_THROW(Json::parse(std::string(5000, '[') + std::string(5000, ']')), std::invalid_argument);
  EXPECT_THROW(Json::parse(std::string(5000, '[')), std::invalid_argument);
}

TEST(Json, IntegersOutsideSixtyFourBitsAreRejected) {
  EXPECT_EQ(Json::parse("9007199254740992").integer(), int64_t{9007199254740992});
  EXPECT_EQ(Json::parse("-9223372036854775808").integer(), INT64_MIN);
  EXPECT_THROW(Json::parse("9223372036854775808").integer(), std::invalid_argument);
  EXPECT_THROW(Json::parse("4.09778e+37").integer(), std::invalid_argument);
  EXPECT_THROW(Json::parse("-1e300").integer(), std::invalid_argument);
}

}  // namespace
}  // namespace weft
