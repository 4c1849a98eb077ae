// The GPU tests' judge of a result (bench/lib/element_check.hpp), on the CPU: a result off by bf16
// roundings passes; an 8x8 block of a 1,600 x 264 output missing one rank's partial product (which
// one relative error over the output lets through), a single NaN, a reference of zeros and the
// empty output are told apart. And the host references it is used with: an all-zero
// expectation is refused, and the MoE rows are where problem.hpp's definition puts them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "element_check.hpp"
#include "weft/reference/host_matrix.hpp"

namespace weft {
namespace {

// A gemm_ar output of one rank at world 4 (1,600 x 264), its reference and scale from random bf16
// inputs; made once per process, copied per test.
struct Output {
  Problem p{OpKind::gemm_ar, 1600, 264, 136, 4, DType::bf16, DType::bf16, {}};
  std::vector<RankTensors> inputs = random_inputs(p, 7);
  HostMatrix want, scale, got;
  Output() {
    want = expected_outputs(p, inputs)[1];
    scale = expected_magnitudes(p, inputs)[1];
    got = want;
    for (float& v : got.data) v = round_to_bf16(v);  // what a bf16 result can do at best
  }
};

Output output() {
  static const Output made;
  return made;
}

TEST(ElementCheck, ABf16RoundedResultPasses) {
  Output o = output();
  const bench::ElementCheck c = bench::check_elements(o.got, o.want, o.scale, bench::bf16_error_factor(o.p));
  EXPECT_TRUE(c.passed()) << c.explain();
  EXPECT_EQ(c.elements, 1600 * 264);
  EXPECT_EQ(c.explain(), "");
}

TEST(ElementCheck, ABlockMissingOneRanksPartialFails) {
  Output o = output();
  // Rank 1's result rows 800..807, columns 128..135, without rank 3's partial product: a tile whose
  // reduction missed a peer.
  const HostMatrix& a = o.inputs[3].at("A");
  const HostMatrix& b = o.inputs[3].at("B");
  for (int64_t i = 800; i < 808; ++i)
    for (int64_t j = 128; j < 136; ++j) {
      double partial = 0;
      for (int64_t k = 0; k < o.p.k; ++k) partial += static_cast<double>(a.at(i, k)) * b.at(j, k);
      o.got.at(i, j) = round_to_bf16(static_cast<float>(o.want.at(i, j) - partial));
    }
  const bench::ElementCheck c = bench::check_elements(o.got, o.want, o.scale, bench::bf16_error_factor(o.p));
  EXPECT_FALSE(c.passed());
  EXPECT_GT(c.outside, 8) << "most of the block";
  EXPECT_LE(c.outside, 64);
  EXPECT_GE(c.first_outside / 264, 800);
  EXPECT_LT(c.first_outside / 264, 808);
  EXPECT_NE(c.explain().find("outside their bound"), std::string::npos) << c.explain();
  // One relative error over the whole output does not see it.
  EXPECT_LT(relative_error(o.got, o.want), 1e-2);
}

TEST(ElementCheck, ASingleNanFails) {
  Output o = output();
  o.got.at(1599, 263) = std::numeric_limits<float>::quiet_NaN();
  const bench::ElementCheck c = bench::check_elements(o.got, o.want, o.scale, bench::bf16_error_factor(o.p));
  EXPECT_FALSE(c.passed());
  EXPECT_EQ(c.nans, 1);
  EXPECT_EQ(c.first_outside, 1599 * 264 + 263);
}

TEST(ElementCheck, AReferenceOfZerosIsRefusedAndAnEmptyOutputPasses) {
  const HostMatrix zeros(4, 8), ones(4, 8, 1.0f);
  const bench::ElementCheck c = bench::check_elements(zeros, zeros, ones, 0.01);
  EXPECT_FALSE(c.passed()) << "a zero reference matches anything";
  EXPECT_NE(c.explain().find("all zero"), std::string::npos) << c.explain();
  EXPECT_TRUE(bench::check_elements(HostMatrix(0, 8), HostMatrix(0, 8), HostMatrix(0, 8), 0.01).passed());
  bench::ElementCheck sum = bench::check_elements(ones, ones, ones, 0.01);
  sum.add(c);
  EXPECT_FALSE(sum.passed()) << "a zero part fails the whole";
  EXPECT_THROW(bench::check_elements(zeros, HostMatrix(4, 9), zeros, 0.01), std::invalid_argument);
}

TEST(ElementCheck, TheBoundGrowsWithTheRoundingsOnAnElementsWay) {
  Problem one{OpKind::gemm_ar, 64, 64, 64, 1, DType::bf16, DType::bf16, {}};
  Problem eight = one;
  eight.world_size = 8;
  EXPECT_LT(bench::bf16_error_factor(one), bench::bf16_error_factor(eight));
  EXPECT_LT(bench::bf16_error_factor(eight), 0.05) << "loose enough to pass anything";
}

TEST(HostMatrix, RelativeErrorRefusesAnAllZeroExpectation) {
  const HostMatrix zeros(2, 2);
  EXPECT_TRUE(std::isinf(relative_error(zeros, zeros)));
  EXPECT_TRUE(std::isinf(relative_error(zeros, zeros, zeros)));
  EXPECT_EQ(relative_error(HostMatrix(0, 4), HostMatrix(0, 4)), 0.0) << "an empty result (a rank that receives no rows)";
}

TEST(HostMatrix, MoeRowsFollowTheDefinition) {
  // One rank, two tokens, three experts, top-2: token 0 picks experts 2 and 0, token 1 experts 0
  // and 1. By expert, then token, then choice: (t0 j1) (t1 j0) | (t1 j1) | (t0 j0).
  Problem p{OpKind::ag_moe, 2, 8, 8, 1, DType::bf16, DType::bf16, {}};
  p.experts = 3;
  p.topk = 2;
  p.choices = {{2, 0, 0, 1}};
  const MoeRows rows = moe_rows(p);
  EXPECT_EQ(rows.row_of, (std::vector<int64_t>{3, 0, 1, 2}));
  EXPECT_EQ(rows.token, (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(rows.first, (std::vector<int64_t>{0, 2, 3, 4}));
  // The reference puts token 0's choice of expert 2 (A_0 B_2^T) in row 3.
  const auto inputs = random_inputs(p, 3);
  const HostMatrix c = expected_outputs(p, inputs)[0];
  double sum = 0;
  for (int64_t k = 0; k < p.k; ++k) sum += static_cast<double>(inputs[0].at("A").at(0, k)) * inputs[0].at("B").at(2 * p.n + 5, k);
  EXPECT_FLOAT_EQ(c.at(3, 5), static_cast<float>(sum));
}

}  // namespace
}  // namespace weft
