// The plan analyses executors run once per plan (plan/analysis.hpp) and the plan cut down to one
// kind of step (plan/transforms.hpp).
#include <gtest/gtest.h>

#include "weft/plan/analysis.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"

namespace weft {
namespace {

TEST(PlanAnalysis, CountsEveryRaiseAndItsWriters) {
  // decomposed gemm_rs at world 2: rank r pushes its partial block into the peer's `received`
  // buffer and raises the peer's arrival counter once per call from its communication stream.
  const Problem p{OpKind::gemm_rs, 256, 128, 64, 2, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_decomposed(p, PlanOptions{});
  const auto raises = counter_raises(plan);
  ASSERT_FALSE(raises.empty());
  for (const auto& [key, raise] : raises) {
    EXPECT_GT(raise.per_call, 0u) << "signal " << key.second << " on rank " << key.first;
    EXPECT_FALSE(raise.writers.empty());
  }
  // Every raise appears once in the per-call total: the sum over counters equals the sum over notifies.
  uint64_t notified = 0, counted = 0;
  for (const RankPlan& rp : plan.ranks)
    for (const Step& s : rp.steps)
      for (const Notify& n : s.notifies) notified += n.increment;
  for (const auto& [key, raise] : raises) counted += raise.per_call;
  EXPECT_EQ(counted, notified);
}

TEST(PlanAnalysis, AStuckWaitNamesThePeersThatRaiseItsCounter) {
  // decomposed gemm_rs at world 4: rank 0's sum waits for slot s filled, which rank s pushes.
  const Problem p{OpKind::gemm_rs, 512, 128, 64, 4, DType::bf16, DType::bf16, {}};
  const Plan plan = plan_decomposed(p, PlanOptions{});
  const RankPlan& rank0 = plan.ranks[0];
  int checked = 0;
  for (const Step& step : rank0.steps)
    for (const Wait& w : step.waits) {
      const std::set<int> peers = peers_raising(plan, 0, w.signal.id);
      const std::string said = describe_raisers(plan, 0, w.signal.id);
      const std::string& name = rank0.signals[static_cast<size_t>(w.signal.id)];
      if (name.rfind("slot", 0) == 0) {
        const int source = std::stoi(name.substr(4));
        EXPECT_EQ(peers, std::set<int>{source}) << name;
        EXPECT_NE(said.find("rank " + std::to_string(source) + " (stream"), std::string::npos) << said;
        EXPECT_NE(said.find("push partial to rank 0"), std::string::npos) << said;
        ++checked;
      } else {
        EXPECT_TRUE(peers.empty()) << name << " is raised by rank 0 alone";
        EXPECT_EQ(said.rfind("raised by this rank", 0), 0u) << said;
      }
    }
  EXPECT_EQ(checked, 3) << "rank 0 waits for the slots of its three peers";
  EXPECT_EQ(describe_raisers(plan, 0, 12345), "raised by nobody");
}

TEST(PlanAnalysis, SingleWriterValuesRunUpWithinACallAndStopWhereOthersWrite) {
  // fused ag_gemm: each pull raises its own arrival counter from the pull's stream alone, so the
  // executor writes the value (1, 2, ... per chunk) instead of adding with a kernel.
  const Problem p{OpKind::ag_gemm, 256, 128, 64, 2, DType::bf16, DType::bf16, {}};
  PlanOptions o;
  o.comm_chunks = 2;
  const Plan plan = plan_fused(p, o);
  const auto raises = counter_raises(plan);
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const auto values = single_writer_values(plan, rank);
    const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
    ASSERT_EQ(values.size(), rp.steps.size());
    std::map<std::pair<int, int>, uint64_t> running;
    int written = 0;
    for (size_t i = 0; i < rp.steps.size(); ++i) {
      ASSERT_EQ(values[i].size(), rp.steps[i].notifies.size());
      for (size_t n = 0; n < values[i].size(); ++n) {
        const Notify& notify = rp.steps[i].notifies[n];
        const auto key = std::make_pair(notify.signal.rank, notify.signal.id);
        const auto& writers = raises.at(key).writers;
        if (writers.size() == 1) {
          running[key] += notify.increment;
          EXPECT_EQ(values[i][n], running[key]);
          ++written;
        } else {
          EXPECT_EQ(values[i][n], 0u);
        }
      }
    }
    EXPECT_GT(written, 0) << "fused ag_gemm's pull counters have one writer each";
  }
  // A GEMM tile's notify is never a single stream's write.
  const Problem ar{OpKind::gemm_ar, 512, 256, 64, 2, DType::bf16, DType::bf16, {}};
  PlanOptions signal;
  signal.gemm_sms = 2;
  const Plan signal_plan = plan_signal(ar, signal);
  int tile_raised = 0;
  for (const auto& [key, raise] : counter_raises(signal_plan)) {
    if (raise.writers.count({key.first, kTileWriter}) == 0) continue;
    ++tile_raised;
    const auto values = single_writer_values(signal_plan, key.first);
    for (size_t i = 0; i < values.size(); ++i)
      for (size_t n = 0; n < values[i].size(); ++n) {
        const Notify& notify = signal_plan.ranks[static_cast<size_t>(key.first)].steps[i].notifies[n];
        if (notify.signal.rank == key.first && notify.signal.id == key.second) {
          EXPECT_EQ(values[i][n], 0u) << "a counter the GEMM's tiles raise too is added to, never written";
        }
      }
  }
  EXPECT_GT(tile_raised, 0) << "signal's wave groups are counted by the GEMM's tiles";
}

TEST(PlanTransforms, StepsOfKindKeepOneKindWithoutWaits) {
  const Problem p{OpKind::ag_gemm, 256, 128, 64, 2, DType::bf16, DType::bf16, {}};
  const Plan fused = plan_fused(p, PlanOptions{});
  const Plan gemms = steps_of_kind(fused, StepKind::gemm);
  EXPECT_EQ(gemms.strategy, fused.strategy + "/gemm-only");
  for (size_t r = 0; r < gemms.ranks.size(); ++r) {
    size_t kept = 0;
    for (const Step& s : fused.ranks[r].steps) kept += std::holds_alternative<GemmStep>(s.body);
    ASSERT_EQ(gemms.ranks[r].steps.size(), kept);
    for (const Step& s : gemms.ranks[r].steps) {
      EXPECT_TRUE(s.waits.empty());
      for (const GemmTile& t : std::get<GemmStep>(s.body).tiles) EXPECT_FALSE(t.wait.has_value()) << "nothing would raise it";
    }
  }
  const Plan sequential = plan_sequential(p, PlanOptions{});
  const Plan collectives = steps_of_kind(sequential, StepKind::collective);
  for (const RankPlan& rp : collectives.ranks) {
    ASSERT_EQ(rp.steps.size(), 1u);
    EXPECT_TRUE(std::holds_alternative<CollectiveStep>(rp.steps[0].body));
  }
}

}  // namespace
}  // namespace weft
