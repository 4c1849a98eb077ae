#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "weft/reference/host_matrix.hpp"
#include "weft/ir/problem.hpp"

namespace weft {
namespace {

TEST(Problem, RejectsReduceScatterRowsNotDivisibleByWorld) {
  Problem p{OpKind::gemm_rs, 10, 8, 8, 4, DType::bf16, DType::bf16, {}};
  try {
    check_problem(p);
    FAIL() << "expected a rejection";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by world_size"), std::string::npos) << e.what();
  }
}

TEST(Problem, RejectsRoutingToMissingRank) {
  Problem p{OpKind::gemm_a2a, 2, 8, 8, 2, DType::bf16, DType::bf16, {{0, 1}, {1, 2}}};
  EXPECT_THROW(check_problem(p), std::invalid_argument);
  p.routing = {{0, 1}, {1, 0}};
  EXPECT_NO_THROW(check_problem(p));
}

TEST(Problem, TokenDispatchIsRoutedLikeTheCombine) {
  Problem p{OpKind::a2a_gemm, 3, 8, 8, 3, DType::bf16, DType::bf16, {}};
  EXPECT_THROW(check_problem(p), std::invalid_argument) << "a2a_gemm needs a routing table";
  p.routing = {{0, 0, 2}, {2, 2, 2}, {1, 0, 0}};
  EXPECT_NO_THROW(check_problem(p));
  EXPECT_EQ(output_rows(p, 0), 4);
  EXPECT_EQ(output_rows(p, 2), 4);
  EXPECT_EQ(parse_op("a2a_gemm"), OpKind::a2a_gemm);
  EXPECT_TRUE(routes_rows(OpKind::a2a_gemm) && routes_rows(OpKind::gemm_a2a) && !routes_rows(OpKind::ag_gemm));
}

TEST(Problem, RejectsNonPositiveSizes) {
  EXPECT_THROW(check_problem(Problem{OpKind::gemm_ar, 0, 8, 8, 1, DType::bf16, DType::bf16, {}}), std::invalid_argument);
  EXPECT_THROW(check_problem(Problem{OpKind::gemm_ar, 8, 8, 8, 0, DType::bf16, DType::bf16, {}}), std::invalid_argument);
}

TEST(Problem, OutputRowsFollowTheOpDefinition) {
  Problem p{OpKind::ag_gemm, 6, 8, 8, 3, DType::bf16, DType::bf16, {}};
  EXPECT_EQ(output_rows(p, 1), 18);
  p.op = OpKind::gemm_rs;
  EXPECT_EQ(output_rows(p, 1), 2);
  p.op = OpKind::gemm_ar;
  EXPECT_EQ(output_rows(p, 2), 6);
  p.op = OpKind::gemm_a2a;
  p.m = 3;
  p.routing = {{0, 0, 2}, {2, 2, 2}, {1, 0, 0}};
  EXPECT_EQ(output_rows(p, 0), 4);
  EXPECT_EQ(output_rows(p, 1), 1);
  EXPECT_EQ(output_rows(p, 2), 4);
  EXPECT_EQ(rows_routed(p)[1][2], 3);
}

TEST(Problem, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(parse_op("gemm_rs"), OpKind::gemm_rs);
  EXPECT_EQ(parse_dtype("f32"), DType::f32);
  EXPECT_THROW(parse_op("gemm_xx"), std::invalid_argument);
  EXPECT_THROW(parse_dtype("int8"), std::invalid_argument);
}

TEST(HostMatrix, Bf16RoundingIsNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);  // halfway between 1 and 1+2^-7: rounds to even
  EXPECT_EQ(round_to_bf16(1.0f + 3.0f / 256), 1.0f + 1.0f / 64);
}

TEST(HostMatrix, RelativeErrorSeesNanAndShapeMismatch) {
  HostMatrix a(2, 2, 1.0f), b(2, 2, 1.0f);
  EXPECT_EQ(relative_error(a, b), 0.0);
  a.at(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isinf(relative_error(a, b)));
  EXPECT_TRUE(std::isinf(relative_error(HostMatrix(2, 3), b)));
}

TEST(HostMatrix, ExpectedAllReduceIsTheSumOfProducts) {
  Problem p{OpKind::gemm_ar, 1, 1, 2, 2, DType::bf16, DType::bf16, {}};
  std::vector<RankTensors> in(2);
  in[0]["A"] = HostMatrix(1, 2, 1.0f);
  in[0]["B"] = HostMatrix(1, 2, 2.0f);
  in[1]["A"] = HostMatrix(1, 2, 3.0f);
  in[1]["B"] = HostMatrix(1, 2, 0.5f);
  const auto out = expected_outputs(p, in);
  EXPECT_FLOAT_EQ(out[0].at(0, 0), 1 * 2 * 2 + 3 * 0.5f * 2);
  EXPECT_FLOAT_EQ(out[1].at(0, 0), out[0].at(0, 0));
}

TEST(HostMatrix, OneRanksExpectedOutputIsThatRanksPartOfEveryRanks) {
  // The per-rank functions skip the other ranks' work (a test's rank checks its own result); they
  // must give that rank exactly what the every-rank functions give it, for every op, both B layouts,
  // skewed MoE routing (empty and overfull experts) and FP8 operands.
  const int world = 3;
  std::vector<Problem> problems;
  for (OpKind op : all_ops())
    for (BLayout layout : {BLayout::nk, BLayout::kn}) {
      Problem p{op, op == OpKind::gemm_rs ? 18 : 7, 10, 12, world, DType::bf16, DType::bf16, {}};
      p.b_layout = layout;
      draw_routing(p, 5);
      problems.push_back(p);
    }
  Problem skewed{OpKind::moe_rs, 9, 8, 6, world, DType::bf16, DType::bf16, {}};
  draw_routing(skewed, 3);
  skewed.choices = random_choices(world, skewed.m, skewed.experts, skewed.topk, 3, /*skew=*/0.9);
  problems.push_back(skewed);
  Problem fp8{OpKind::ag_gemm, 4, 8, 256, world, DType::e4m3, DType::bf16, {}};
  fp8.scaling = Scaling::block;
  problems.push_back(fp8);
  for (const Problem& p : problems) {
    const std::vector<RankTensors> in = random_inputs(p, 9);
    const std::vector<HostMatrix> every = expected_outputs(p, in), sizes = expected_magnitudes(p, in);
    for (int r = 0; r < world; ++r) {
      const HostMatrix mine = expected_output(p, in, r), size = expected_magnitude(p, in, r);
      EXPECT_EQ(mine.rows, every[static_cast<size_t>(r)].rows) << describe(p) << " rank " << r;
      EXPECT_EQ(mine.data, every[static_cast<size_t>(r)].data) << describe(p) << " rank " << r;
      EXPECT_EQ(size.data, sizes[static_cast<size_t>(r)].data) << describe(p) << " rank " << r;
      EXPECT_GT(mine.data.size(), 0u) << describe(p) << " rank " << r;
    }
  }
  EXPECT_THROW(expected_output(problems[0], random_inputs(problems[0], 1), world), std::invalid_argument);
}

}  // namespace
}  // namespace weft
