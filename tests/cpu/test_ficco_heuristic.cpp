#include <gtest/gtest.h>

#include "weft/model/ficco_heuristic.hpp"

namespace weft {
namespace {

Problem ag(int64_t m_per_rank, int64_t n, int64_t k, int world) {
  return Problem{OpKind::ag_gemm, m_per_rank, n, k, world, DType::bf16, DType::bf16, {}};
}

TEST(FiccoHeuristic, TwoDimensionalWhenRowsDoNotExceedK) {
  EXPECT_EQ(pick_ficco_schedule(ag(256, 4096, 8192, 4), {}).schedule, FiccoSchedule::uniform_fused_2d);  // M = 1024 <= K
  EXPECT_EQ(pick_ficco_schedule(ag(2048, 4096, 8192, 4), {}).schedule, FiccoSchedule::uniform_fused_2d);  // M = K
}

TEST(FiccoHeuristic, OneDimensionalTranchesFollowTheGemmSizeAgainstTheMachine) {
  MachineProfile machine;
  machine.peak_flops = 1e15;
  // 2 * 8192 * 1024 * 1024 = 17 GFLOP: 17 us at peak, far under 1 ms.
  EXPECT_EQ(pick_ficco_schedule(ag(2048, 1024, 1024, 4), machine).schedule, FiccoSchedule::uniform_fused_1d);
  // 2 * 32768 * 8192 * 4096 = 2.2 TFLOP: 2.2 ms, between 1 and 5 ms.
  EXPECT_EQ(pick_ficco_schedule(ag(8192, 8192, 4096, 4), machine).schedule, FiccoSchedule::hetero_fused_1d);
  // 2 * 65536 * 28672 * 8192 = 30.8 TFLOP: 31 ms, past 5 ms.
  EXPECT_EQ(pick_ficco_schedule(ag(8192, 28672, 8192, 8), machine).schedule, FiccoSchedule::hetero_unfused_1d);
}

TEST(FiccoHeuristic, ReportsTheQuantitiesItDecidedOn) {
  MachineProfile machine;
  machine.peak_flops = 1e15;
  machine.memory_bytes_per_s = 4e12;
  const auto d = pick_ficco_schedule(ag(1024, 2048, 512, 2), machine);
  const double m = 2048, n = 2048, k = 512;
  EXPECT_DOUBLE_EQ(d.memory_traffic, 2 * (m * k + n * k + m * n));
  EXPECT_DOUBLE_EQ(d.op_to_byte, 2 * m * n * k / d.memory_traffic);
  EXPECT_DOUBLE_EQ(d.combined, 2 * m * n * k / 1e15);
}

TEST(FiccoHeuristic, OnlyForAllGatherGemm) {
  Problem p = ag(64, 64, 64, 2);
  p.op = OpKind::gemm_ar;
  EXPECT_THROW(pick_ficco_schedule(p, {}), std::invalid_argument);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(MachineProfile, RoundTripsThroughJsonAndRejectsNonsense) {
  MachineProfile p;
  p.device = "NVIDIA H200";
  p.peak_flops = 801.5e12;
  p.memory_bytes_per_s = 4.1e12;
  p.source = "test";
  p.tile_rates = {{"128x192", 0.97}, {"128x128", 0.86}};
  const MachineProfile back = parse_machine_profile(machine_profile_json(p));
  EXPECT_EQ(back.tile_rates, p.tile_rates);
  EXPECT_THROW(parse_machine_profile(R"({"device": "x", "peak_flops": 1e15, "memory_bytes_per_s": 1e12, "tile_rates": {"128x96": 0}})"),
               std::invalid_argument);
  EXPECT_EQ(back.device, p.device);
  EXPECT_DOUBLE_EQ(back.peak_flops, p.peak_flops);
  EXPECT_DOUBLE_EQ(back.memory_bytes_per_s, p.memory_bytes_per_s);
  EXPECT_EQ(back.source, "test");
  EXPECT_THROW(parse_machine_profile(R"({"device": "x", "peak_flops": 1e15})"), std::invalid_argument);
  EXPECT_THROW(parse_machine_profile(R"({"device": "x", "peak_flops": 0, "memory_bytes_per_s": 1e12})"), std::invalid_argument);
  EXPECT_THROW(load_machine_profile("/nonexistent/profile.json"), std::invalid_argument);
}

TEST(MachineProfile, TheFiccoStrategyPicksByTheGivenMachine) {
  // A 2048 x 1024 x 512 AG+GEMM at world 2 (M > K): at 1e15 FLOP/s it is far under the 1 ms
  // threshold (uniform_fused_1d); on a machine a million times slower, far over (hetero_unfused_1d).
  const Problem p{OpKind::ag_gemm, 1024, 1024, 512, 2, DType::bf16, DType::bf16, {}};
  PlanOptions fast, slow;
  fast.machine.peak_flops = 1e15;
  slow.machine.peak_flops = 1e9;
  EXPECT_EQ(find_strategy("ficco").build(p, fast).strategy, "ficco=uniform_fused_1d");
  EXPECT_EQ(find_strategy("ficco").build(p, slow).strategy, "ficco=hetero_unfused_1d");
  // The machine's own threshold: tuned down a million times, the fast machine picks as the slow one.
  fast.machine.ficco_threshold_seconds = 1e-9;
  EXPECT_EQ(find_strategy("ficco").build(p, fast).strategy, "ficco=hetero_unfused_1d");
  EXPECT_DOUBLE_EQ(parse_machine_profile(machine_profile_json(fast.machine)).ficco_threshold_seconds, 1e-9);
}

TEST(FiccoHeuristic, DispatchIsJudgedByTheLargestExpertGemm) {
  // 64 tokens per rank, all routed to rank 1: its expert GEMM has 128 rows (> K = 48: 1D, and
  // far under the 1 ms threshold at 1e15 FLOP/s); K = 256 makes it a 2D case (M <= K).
  Problem p{OpKind::a2a_gemm, 64, 32, 48, 2, DType::bf16, DType::bf16, {std::vector<int>(64, 1), std::vector<int>(64, 1)}};
  MachineProfile fast;
  fast.peak_flops = 1e15;
  FiccoDecision d = pick_ficco_schedule(p, fast);
  EXPECT_EQ(d.schedule, FiccoSchedule::uniform_fused_1d);
  EXPECT_DOUBLE_EQ(d.op_to_byte * d.memory_traffic, 2.0 * 128 * 32 * 48);  // the 128-row GEMM of rank 1
  p.k = 256;
  EXPECT_EQ(pick_ficco_schedule(p, fast).schedule, FiccoSchedule::uniform_fused_2d);
  const Plan plan = find_strategy("ficco").build(p, PlanOptions{});
  EXPECT_EQ(plan.strategy, "ficco=uniform_fused_2d");
  Problem rs{OpKind::gemm_rs, 64, 32, 48, 2, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(pick_ficco_schedule(rs, fast), std::invalid_argument);
}

}  // namespace
}  // namespace weft
