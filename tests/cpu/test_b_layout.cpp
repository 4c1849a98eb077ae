// B in layout kn (row-major [K, N], ir/problem.hpp) through every strategy of every op with a B
// operand, worlds 1 to 4: the plan declares B column-major on every rank, validates, and the
// reference executor, reading B's memory as the caller lays it out, computes the op's definition.
// And ag_gemm's gathered A (RankPlan::gathered_a): every strategy says where every shard lies at
// the end, and the CPU proof checks that those rows are the ranks' shards.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "../support/random_plans.hpp"
#include "../support/strategy_cases.hpp"

#include "weft/plan/op_arguments.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/validation.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft {
namespace {

using Case = testing_support::StrategyCase;
using testing_support::case_name;

// Every (GEMM op, strategy) pair; ag_attention has no B.
std::vector<Case> gemm_cases() { return testing_support::strategy_cases(all_ops(), 4); }

// A small problem (the property tests' draw) whose N and K differ: a plan that ignored the layout
// would declare B [N, K] and the reference executor would refuse its [K, N] input.
Problem random_problem(OpKind op, int world, std::mt19937_64& rng) {
  Problem p = testing_support::random_problem(op, world, rng);
  while (p.k == p.n) p.k = 1 + static_cast<int64_t>(rng() % 33);
  return p;
}

// The property tests' options, and two_level across nodes of one or two ranks where the world
// splits so (its network rounds).
PlanOptions random_options(const std::string& strategy, Problem& p, std::mt19937_64& rng) {
  PlanOptions o = testing_support::random_options(strategy, p, rng);
  if (strategy == "two_level" && p.world_size % 2 == 0 && rng() % 2) o.topology = Topology::nodes_of(2, p.world_size / 2);
  return o;
}

void expect_b_column_major(const Plan& plan) {
  for (const RankPlan& rp : plan.ranks) {
    const BufferDecl& b = rp.buffers.at(static_cast<size_t>(find_buffer(rp, "B")));
    EXPECT_EQ(b.order, MemoryOrder::column_major) << "rank " << rp.rank;
    EXPECT_EQ(b.rows, b_rows(plan.problem)) << "B is still the [N, K] matrix to the plan";
    EXPECT_EQ(b.cols, plan.problem.k);
  }
}

// For seeds 1..4: a random problem of the case (B laid out as `layout` says, or alternating by seed)
// and the case's two plans of it: the strategy's own (at world 1 too), and the one an Op runs
// (make_plan: at world 1 the GEMM alone); `check` gets each.
template <class Check>
void for_each_plan(const Case& c, uint64_t mix, std::optional<BLayout> layout, Check check) {
  const Strategy& strategy = find_strategy(c.strategy);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed * mix + static_cast<uint64_t>(c.world));
    Problem p = random_problem(c.op, c.world, rng);
    p.b_layout = layout.value_or(seed % 2 ? BLayout::kn : BLayout::nk);
    const PlanOptions o = random_options(c.strategy, p, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + describe(p) + " AllGather " + std::string(to_string(o.all_gather_source)));
    PlanOptions own = o;
    own.keep_strategy_at_world_one = true;
    for (const Plan& plan : {strategy.build(p, own), make_plan(strategy, p, o)}) {
      SCOPED_TRACE("plan " + plan.strategy);
      check(plan, seed);
    }
  }
}

class BLayoutProperty : public testing::TestWithParam<Case> {};

TEST_P(BLayoutProperty, EveryStrategyTakesBStoredKByN) {
  for_each_plan(GetParam(), 104729, BLayout::kn, [](const Plan& plan, uint64_t seed) {
    expect_b_column_major(plan);
    const CpuProof proof = prove_on_cpu(plan, seed);
    ASSERT_TRUE(proof.passed()) << proof.explain() << to_string(plan);
  });
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, BLayoutProperty, testing::ValuesIn(gemm_cases()), case_name);

std::vector<Case> ag_gemm_cases() {
  std::vector<Case> cases;
  for (const Case& c : gemm_cases())
    if (c.op == OpKind::ag_gemm) cases.push_back(c);
  return cases;
}

class GatheredAProperty : public testing::TestWithParam<Case> {};

// Every ag_gemm plan keeps the gathered A somewhere; the proof compares its rows with the shards.
TEST_P(GatheredAProperty, EveryAllGatherPlanSaysWhereTheGatheredALies) {
  for_each_plan(GetParam(), 7907, std::nullopt, [](const Plan& plan, uint64_t seed) {
    for (const RankPlan& rp : plan.ranks) EXPECT_FALSE(rp.gathered_a.empty()) << "rank " << rp.rank;
    const CpuProof proof = prove_on_cpu(plan, seed);
    ASSERT_TRUE(proof.passed()) << proof.explain() << to_string(plan);
  });
}

INSTANTIATE_TEST_SUITE_P(AllGatherStrategies, GatheredAProperty, testing::ValuesIn(ag_gemm_cases()), case_name);

// The proof catches a plan that names the wrong rows as the gathered A (two shards swapped), and the
// structure check one whose pieces do not add up to W * M rows of K columns.
TEST(GatheredA, AWrongPieceFailsTheProofAndAShortOneTheCheck) {
  const Problem p{OpKind::ag_gemm, 8, 24, 16, 3, DType::bf16, DType::bf16, {}};
  Plan plan = plan_decomposed(p, {});
  ASSERT_TRUE(prove_on_cpu(plan, 3).passed());
  Plan swapped = plan;
  std::swap(swapped.ranks[1].gathered_a[0], swapped.ranks[1].gathered_a[2]);
  const CpuProof wrong = prove_on_cpu(swapped, 3);
  EXPECT_FALSE(wrong.passed());
  EXPECT_NE(wrong.failure.find("rank 1's gathered A differs"), std::string::npos) << wrong.explain();
  Plan short_of_rows = plan;
  short_of_rows.ranks[2].gathered_a.pop_back();
  EXPECT_NE(validate_plan(short_of_rows).summary().find("not W * M = 24"), std::string::npos) << validate_plan(short_of_rows).summary();
  Plan not_ag = plan_decomposed(Problem{OpKind::gemm_ar, 8, 24, 16, 3, DType::bf16, DType::bf16, {}}, {});
  not_ag.ranks[0].gathered_a = {not_ag.ranks[0].output};
  EXPECT_NE(validate_plan(not_ag).summary().find("only ag_gemm gathers A"), std::string::npos);
}

// B's memory in layout kn is read only by GEMMs: a copy of it fails the structure check, as does a
// column-major output (the other steps move row-major boxes).
TEST(BLayout, OnlyAGemmsBOperandReadsAColumnMajorBuffer) {
  Problem p{OpKind::gemm_ar, 16, 24, 8, 2, DType::bf16, DType::bf16, {}};
  p.b_layout = BLayout::kn;
  const Plan plan = find_strategy("sequential").build(p, {});
  ASSERT_TRUE(validate_plan(plan).ok()) << validate_plan(plan).summary();
  Plan copies_b = plan;
  RankPlan& rp = copies_b.ranks[0];
  const BufferId b = find_buffer(rp, "B");
  Step copy;
  copy.label = "copy B";
  copy.body = CopyStep{Region{0, b, Rect{0, 0, 8, 8}}, Region{0, find_buffer(rp, "C"), Rect{0, 0, 8, 8}}};
  rp.steps.insert(rp.steps.begin(), copy);
  EXPECT_NE(validate_plan(copies_b).summary().find("only a GEMM's b operand may read"), std::string::npos) << validate_plan(copies_b).summary();
}

// The reference inputs: B's memory is the transpose of the nk draw of the same seed (the same
// matrices either way), and the op's definition reads it as such.
TEST(BLayout, InputsOfOneSeedAreTheSameMatrixInEitherLayout) {
  Problem nk{OpKind::ag_gemm, 5, 7, 3, 2, DType::bf16, DType::bf16, {}};
  Problem kn = nk;
  kn.b_layout = BLayout::kn;
  const auto row_major = random_inputs(nk, 11), transposed_inputs = random_inputs(kn, 11);
  for (int r = 0; r < 2; ++r) {
    const HostMatrix& b = row_major[static_cast<size_t>(r)].at("B");
    const HostMatrix& bt = transposed_inputs[static_cast<size_t>(r)].at("B");
    ASSERT_EQ(bt.rows, 3);
    ASSERT_EQ(bt.cols, 7);
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(bt.at(j, i), b.at(i, j));
  }
  const auto want = expected_outputs(nk, row_major), got = expected_outputs(kn, transposed_inputs);
  for (size_t r = 0; r < want.size(); ++r) EXPECT_EQ(relative_error(got[r], want[r]), 0.0);
}

TEST(BLayout, NamesParsesAndReachesTheOpsProblem) {
  EXPECT_EQ(parse_b_layout("kn"), BLayout::kn);
  EXPECT_EQ(parse_b_layout("nk"), BLayout::nk);
  EXPECT_THROW(parse_b_layout("t"), std::invalid_argument);
  OpShape shape{OpKind::gemm_rs, 16, 8, 32};
  shape.b_layout = BLayout::kn;
  EXPECT_EQ(op_call_problem(shape, 2, 32, {}).b_layout, BLayout::kn);
  Problem p{OpKind::gemm_ar, 16, 24, 8, 2, DType::bf16, DType::bf16, {}};
  p.b_layout = BLayout::kn;
  EXPECT_NE(describe(p).find("b_layout=kn"), std::string::npos);
  // ag_attention has no B to lay out.
  Problem attention;
  attention.op = OpKind::ag_attention;
  attention.m = 4;
  attention.batch = attention.heads = attention.kv_heads = 1;
  attention.head_dim = 8;
  attention.b_layout = BLayout::kn;
  EXPECT_THROW(check_problem(attention), std::invalid_argument);
}

}  // namespace
}  // namespace weft
