// FP8: the host conversions against hand-computed values (round to nearest even, saturation, NaN,
// subnormals), quantization, scale grids, the problem's rules, the reference executor's scaled GEMM
// and scale movement, the checks that refuse what FP8 cannot do, the decline of a strategy that cuts
// K inside a scale block (and auto passing over it), and the simulator's FP8 rates and bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "weft/model/simulator.hpp"
#include "weft/plan/auto.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/reference/cpu_proof.hpp"
#include "weft/reference/fp8.hpp"

namespace weft {
namespace {

// What `f` throws as E (empty when it throws nothing).
template <class E = std::exception, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return {};
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A value, what the format rounds it to, and that value's code.
struct RoundingCase {
  float in, out;
  uint8_t bits;
};

void expect_rounding(const std::vector<RoundingCase>& cases, DType format) {
  for (const RoundingCase& c : cases) {
    SCOPED_TRACE(c.in);
    const float got = round_to_fp8(c.in, format);
    EXPECT_EQ(got, c.out);
    EXPECT_EQ(std::signbit(got), std::signbit(c.out));
    EXPECT_EQ(fp8_bits(c.in, format), c.bits);
    EXPECT_EQ(fp8_value(c.bits, format), c.out);
  }
}

TEST(Fp8Conversion, E4m3RoundsToNearestEvenAndSaturates) {
  expect_rounding({
      {1.0f, 1.0f, 0x38},          // 0 0111 000
      {448.0f, 448.0f, 0x7e},      // the largest: 1.75 * 2^8
      {-448.0f, -448.0f, 0xfe},
      {240.0f, 240.0f, 0x77},      // 1.875 * 2^7
      {464.0f, 448.0f, 0x7e},      // half way to 480, which E4M3FN lacks (NaN's code): saturates
      {500.0f, 448.0f, 0x7e},
      {1e9f, 448.0f, 0x7e},
      {kInf, 448.0f, 0x7e},        // no infinity: saturates
      {-kInf, -448.0f, 0xfe},
      {1.0625f, 1.0f, 0x38},       // half way between 1 (mantissa 000) and 1.125 (001): to the even
      {1.1875f, 1.25f, 0x3a},      // half way between 1.125 (001) and 1.25 (010): to the even
      {0.3f, 0.3125f, 0x2a},       // 9.6 steps of 2^-5: 10
      {0.015625f, 0.015625f, 0x08},        // 2^-6, the smallest normal
      {0.0146484375f, 0.015625f, 0x08},    // 7.5 subnormal steps of 2^-9: rounds to 8, a normal
      {0.001953125f, 0.001953125f, 0x01},  // 2^-9, the smallest subnormal
      {0.0009765625f, 0.0f, 0x00},         // 2^-10: half way to 2^-9, to the even (zero)
      {0.0029296875f, 0.00390625f, 0x02},  // 1.5 * 2^-9: to the even, 2 * 2^-9
      {-0.0f, -0.0f, 0x80},
  }, DType::e4m3);
  EXPECT_TRUE(std::isnan(round_to_fp8(kNaN, DType::e4m3)));
  EXPECT_EQ(fp8_bits(kNaN, DType::e4m3), 0x7f);
  EXPECT_TRUE(std::isnan(fp8_value(0x7f, DType::e4m3)));
  EXPECT_TRUE(std::isnan(fp8_value(0xff, DType::e4m3)));
}

TEST(Fp8Conversion, E5m2RoundsToNearestEvenAndSaturates) {
  expect_rounding({
      {1.0f, 1.0f, 0x3c},               // 0 01111 00
      {57344.0f, 57344.0f, 0x7b},       // the largest: 1.75 * 2^15
      {60000.0f, 57344.0f, 0x7b},
      {kInf, 57344.0f, 0x7b},           // saturating: an infinity becomes the largest
      {-kInf, -57344.0f, 0xfb},
      {1.125f, 1.0f, 0x3c},             // half way between 1 (00) and 1.25 (01): to the even
      {1.375f, 1.5f, 0x3e},             // half way between 1.25 (01) and 1.5 (10): to the even
      {1.0f / 65536, 1.0f / 65536, 0x01},  // 2^-16, the smallest subnormal
      {1.0f / 16384, 1.0f / 16384, 0x04},  // 2^-14, the smallest normal
  }, DType::e5m2);
  EXPECT_EQ(fp8_value(0x7c, DType::e5m2), kInf);
  EXPECT_TRUE(std::isnan(fp8_value(0x7d, DType::e5m2)));
  EXPECT_TRUE(std::isnan(round_to_fp8(kNaN, DType::e5m2)));
}

// Every finite code decodes to a value that encodes back to it: the encoder and decoder agree on
// the whole format, subnormals and signs included.
TEST(Fp8Conversion, EveryFiniteCodeRoundTrips) {
  for (DType format : {DType::e4m3, DType::e5m2})
    for (int code = 0; code < 256; ++code) {
      const float value = fp8_value(static_cast<uint8_t>(code), format);
      if (!std::isfinite(value)) continue;
      SCOPED_TRACE(std::string(to_string(format)) + " code " + std::to_string(code));
      EXPECT_EQ(round_to_fp8(value, format), value);
      EXPECT_EQ(fp8_bits(value, format), code);
    }
}

TEST(Fp8Quantize, ScalesAreAmaxOverTheLargestAndValuesRoundTrip) {
  HostMatrix x(2, 2);
  x.data = {1.0f, -2.0f, 0.5f, 4.0f};
  const Quantized tensor = quantize(x, ScaleGrid{0, 0, 0}, DType::e4m3);
  ASSERT_EQ(tensor.scales.data.size(), 1u);
  EXPECT_FLOAT_EQ(tensor.scales.data[0], 4.0f / 448);
  EXPECT_EQ(tensor.values.data, (std::vector<float>{112, -224, 56, 448}));
  const Quantized rows = quantize(x, ScaleGrid{1, 0, 0}, DType::e4m3);
  EXPECT_EQ(rows.scales.rows, 2);
  EXPECT_FLOAT_EQ(rows.scales.data[0], 2.0f / 448);
  EXPECT_FLOAT_EQ(rows.scales.data[1], 4.0f / 448);
  const HostMatrix back = dequantize(rows.values, ScaleGrid{1, 0, 0}, rows.scales);
  for (size_t i = 0; i < x.data.size(); ++i) EXPECT_NEAR(back.data[i], x.data[i], 1e-6);
  // A cell of zeros gets scale 1, not a division by zero.
  EXPECT_EQ(quantize(HostMatrix(1, 3), ScaleGrid{0, 0, 0}, DType::e4m3).scales.data[0], 1.0f);
}

TEST(Fp8ScaleGrid, BlocksOfAAndOfBWithExperts) {
  const ScaleGrid a{1, kScaleBlock, 0};
  EXPECT_EQ(scale_rows(a, 3), 3);
  EXPECT_EQ(scale_cols(a, 300), 3);
  EXPECT_EQ(scale_cell(a, 2, 256), (ScaleCell{2, 2}));
  EXPECT_EQ(scales_touched(a, 0, 100, 2, 60), 4);  // K columns 100..159 span two blocks
  // B of two experts of 200 rows: each expert's rows blocked on their own (2 blocks each).
  const ScaleGrid b{kScaleBlock, kScaleBlock, 200};
  EXPECT_EQ(scale_rows(b, 400), 4);
  EXPECT_EQ(scale_cell(b, 199, 0), (ScaleCell{1, 0}));
  EXPECT_EQ(scale_cell(b, 200, 0), (ScaleCell{2, 0}));
  EXPECT_EQ(scale_cell(b, 330, 129), (ScaleCell{3, 1}));
  EXPECT_TRUE(spans_rows(b));
  EXPECT_TRUE(spans_rows(ScaleGrid{0, 0, 0}));
  EXPECT_FALSE(spans_rows(a));
}

Problem fp8_problem(OpKind op, int world, Scaling scaling, int64_t m = 24, int64_t n = 40, int64_t k = 300) {
  Problem p;
  p.op = op;
  p.m = op == OpKind::gemm_rs ? m * world : m;
  p.n = n;
  p.k = k;
  p.world_size = world;
  p.input_dtype = DType::e4m3;
  p.scaling = scaling;
  draw_routing(p, 5);
  return p;
}

TEST(Fp8Problem, TheChecksSayWhatFp8Needs) {
  Problem p = fp8_problem(OpKind::gemm_ar, 2, Scaling::none);
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { check_problem(p); }), "need a scaling mode");
  p.scaling = Scaling::row;
  EXPECT_NO_THROW(check_problem(p));
  EXPECT_CONTAINS(describe(p), "e4m3->bf16 scaling=row");
  p.output_dtype = DType::e4m3;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { check_problem(p); }), "bf16 or f32");
  p.output_dtype = DType::f32;
  p.input_dtype = DType::e5m2;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { check_problem(p); }), "e5m2 x e5m2");
  p.b_dtype = DType::e4m3;  // a backward's gradients times weights
  EXPECT_NO_THROW(check_problem(p));
  EXPECT_EQ(operand_b_dtype(p), DType::e4m3);
  p.b_dtype = DType::bf16;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { check_problem(p); }), "FP8 multiplies only FP8");
  Problem plain;
  plain.m = plain.n = plain.k = 8;
  plain.scaling = Scaling::tensor;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { check_problem(plain); }), "for FP8 operands");
  EXPECT_EQ(parse_scaling("block"), Scaling::block);
  EXPECT_THROW(parse_scaling("blocks"), std::invalid_argument);
  EXPECT_EQ(parse_dtype("e4m3"), DType::e4m3);
  EXPECT_EQ(dtype_bytes(DType::e4m3), 1);
}

// The GEMM alone in every scaling mode, both output dtypes, e4m3 x e4m3 and e5m2 x e4m3: the
// reference's per-block fp32 sums against the dequantized product in double. K = 300 has a partial
// last block, and the inputs' sizes vary per row and block, so a scale applied to the wrong block
// or row is far outside the tolerance.
TEST(Fp8Reference, GemmAloneMatchesTheDequantizedProduct) {
  for (Scaling scaling : {Scaling::tensor, Scaling::row, Scaling::block})
    for (DType out : {DType::bf16, DType::f32})
      for (bool backward : {false, true}) {
        Problem p = fp8_problem(OpKind::gemm_ar, 1, scaling, 37, 45, 300);
        p.output_dtype = out;
        if (backward) {
          p.input_dtype = DType::e5m2;
          p.b_dtype = DType::e4m3;
        }
        SCOPED_TRACE(describe(p));
        const Plan plan = plan_gemm_alone(p, PlanOptions{}, "sequential");
        const CpuProof proof = prove_on_cpu(plan, 3);
        EXPECT_TRUE(proof.passed()) << proof.explain();
        const auto inputs = random_inputs(p, 3);
        // The inputs are FP8 values with scales of the grid's shape.
        for (float v : inputs[0].at("A").data) ASSERT_EQ(round_to_fp8(v, p.input_dtype), v);
        EXPECT_EQ(inputs[0].at("A_scale").cols, scaling == Scaling::block ? 3 : 1);
        EXPECT_EQ(inputs[0].at("B_scale").rows, scaling == Scaling::tensor ? 1 : scaling == Scaling::row ? 45 : 1);
      }
}

TEST(Fp8Reference, RefusesInputsThatAreNotFp8Values) {
  const Problem p = fp8_problem(OpKind::gemm_ar, 1, Scaling::tensor);
  const Plan plan = plan_gemm_alone(p, PlanOptions{}, "sequential");
  auto inputs = random_inputs(p, 1);
  inputs[0]["A"].data[0] = 0.3f;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { run_reference(plan, inputs); }), "not an e4m3 value");
  inputs = random_inputs(p, 1);
  inputs[0].erase("B_scale");
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { run_reference(plan, inputs); }), "B_scale");
}

// Tensor scaling's A scale is one for all ranks' rows: gathering rows whose scales differ is an
// error naming the buffer, not a silently wrong product.
TEST(Fp8Reference, GatheringRowsWithDifferentTensorScalesFails) {
  const Problem p = fp8_problem(OpKind::ag_gemm, 2, Scaling::tensor);
  const Plan plan = make_plan(find_strategy("sequential"), p);
  auto inputs = random_inputs(p, 1);
  EXPECT_NO_THROW(run_reference(plan, inputs));
  inputs[1]["A_scale"].data[0] *= 2;
  EXPECT_CONTAINS(error_of<ReferenceTimeout>([&] { run_reference(plan, inputs); }), "tensor scales differ");
}

// Scales travel with their rows: the gathered A of a sequential AllGather holds every rank's row
// scales, in rank order.
TEST(Fp8Reference, AllGatherMovesRowScales) {
  const Problem p = fp8_problem(OpKind::ag_gemm, 3, Scaling::block);
  const Plan plan = make_plan(find_strategy("sequential"), p);
  const auto inputs = random_inputs(p, 2);
  const auto memory = run_reference(plan, inputs);
  const HostMatrix& gathered = memory[1].at("A_gathered_scale");
  ASSERT_EQ(gathered.rows, 3 * p.m);
  for (int s = 0; s < 3; ++s)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t b = 0; b < gathered.cols; ++b) EXPECT_EQ(gathered.at(s * p.m + i, b), inputs[static_cast<size_t>(s)].at("A_scale").at(i, b));
}

void set_dtype(Plan& plan, const std::string& buffer, DType dtype) {
  for (RankPlan& rp : plan.ranks) rp.buffers.at(static_cast<size_t>(find_buffer(rp, buffer))).dtype = dtype;
}

TEST(Fp8Checks, Fp8MovesOnlyWithItsDtypeAndIsNeverReduced) {
  Plan gather = make_plan(find_strategy("sequential"), fp8_problem(OpKind::ag_gemm, 2, Scaling::row));
  EXPECT_TRUE(validate_plan(gather).ok());
  set_dtype(gather, "A_gathered", DType::bf16);
  EXPECT_CONTAINS(validate_plan(gather).summary(), "moves e4m3 buffer 'A' into bf16 buffer 'A_gathered'");
  Plan reduce = make_plan(find_strategy("sequential"), fp8_problem(OpKind::gemm_rs, 2, Scaling::row));
  EXPECT_TRUE(validate_plan(reduce).ok());
  set_dtype(reduce, "P", DType::e4m3);
  const std::string errors = validate_plan(reduce).summary();
  EXPECT_CONTAINS(errors, "reduces e4m3 buffer 'P'");
  EXPECT_CONTAINS(errors, "an FP8 GEMM gives bf16 or f32");
}

// ficco's 2D schedule cuts K into W slices of k / W columns: with block scaling and k = 192 at world
// 2, the second slice starts at column 96, inside a scale block. The structure check refuses the
// plan, make_plan declines it naming why, and the same problem with row scaling is proved.
TEST(Fp8Declines, KSlicesInsideAScaleBlock) {
  const Problem block = fp8_problem(OpKind::ag_gemm, 2, Scaling::block, 24, 40, 192);
  const Strategy& two_d = find_strategy("ficco_uniform_fused_2d");
  EXPECT_CONTAINS(validate_plan(two_d.build(block, PlanOptions{})).summary(), "from K column 96, inside a 128-column scale block");
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { make_plan(two_d, block); }), "'ficco_uniform_fused_2d' declines block-scaled FP8 here");
  // At k = 256 the slices are whole blocks.
  EXPECT_TRUE(prove_on_cpu(make_plan(two_d, fp8_problem(OpKind::ag_gemm, 2, Scaling::block, 24, 40, 256)), 1).passed());
  Problem row = block;
  row.scaling = Scaling::row;
  const CpuProof proof = prove_on_cpu(make_plan(two_d, row), 1);
  EXPECT_TRUE(proof.passed()) << proof.explain();
}

// auto passes over a strategy that declines: among candidates of which only the declining one could
// beat sequential, it keeps sequential (with row scaling, the same shape picks the 2D schedule).
TEST(Fp8Declines, AutoPassesOverADecliningStrategy) {
  const std::vector<std::string> candidates = {"sequential", "ficco_uniform_fused_2d"};
  Problem row = fp8_problem(OpKind::ag_gemm, 8, Scaling::row, 1024, 8192, 8192 + 64);
  const AutoChoice with_row = choose_strategy(row, PlanOptions{}, candidates);
  Problem block = row;
  block.scaling = Scaling::block;
  const AutoChoice with_block = choose_strategy(block, PlanOptions{}, candidates);
  EXPECT_EQ(with_row.candidate.strategy, "ficco_uniform_fused_2d") << with_row.reason;
  EXPECT_EQ(with_block.candidate.strategy, "sequential") << with_block.reason;
}

double step_seconds(const Plan& plan, const Simulation& sim, int rank, const std::string& label) {
  for (const SimulatedStep& s : sim.steps)
    if (s.rank == rank && plan.ranks[static_cast<size_t>(rank)].steps[static_cast<size_t>(s.step)].label == label) return s.end - s.start;
  ADD_FAILURE() << "no step '" << label << "' on rank " << rank;
  return 0;
}

// An FP8 GEMM runs at fp8_speedup times the bf16 rate; an FP8 AllGather moves half the bytes (plus
// its scales).
TEST(Fp8Simulator, GemmAtTwiceTheRateAndAllGatherAtHalfTheBytes) {
  const MachineProfile machine;
  Problem bf16 = fp8_problem(OpKind::gemm_ar, 1, Scaling::row, 8192, 8192, 8192);
  bf16.input_dtype = DType::bf16;
  bf16.scaling = Scaling::none;
  const Problem fp8 = fp8_problem(OpKind::gemm_ar, 1, Scaling::row, 8192, 8192, 8192);
  const double gemm_ratio = simulate(plan_gemm_alone(fp8, PlanOptions{}, "sequential"), machine).seconds /
                            simulate(plan_gemm_alone(bf16, PlanOptions{}, "sequential"), machine).seconds;
  EXPECT_GT(gemm_ratio, 0.45);
  EXPECT_LT(gemm_ratio, 0.6);

  Problem ag_bf16 = fp8_problem(OpKind::ag_gemm, 4, Scaling::row, 8192, 256, 8192);
  ag_bf16.input_dtype = DType::bf16;
  ag_bf16.scaling = Scaling::none;
  const Problem ag_fp8 = fp8_problem(OpKind::ag_gemm, 4, Scaling::row, 8192, 256, 8192);
  const Plan plan_bf16 = make_plan(find_strategy("sequential"), ag_bf16), plan_fp8 = make_plan(find_strategy("sequential"), ag_fp8);
  const std::string gather = plan_bf16.ranks[0].steps[0].label;
  ASSERT_TRUE(std::holds_alternative<CollectiveStep>(plan_bf16.ranks[0].steps[0].body)) << gather;
  const double gather_ratio =
      step_seconds(plan_fp8, simulate(plan_fp8, machine), 0, gather) / step_seconds(plan_bf16, simulate(plan_bf16, machine), 0, gather);
  EXPECT_GT(gather_ratio, 0.45);
  EXPECT_LT(gather_ratio, 0.6);
}

// The overlap GEMM's FP8 main loop runs at fp8_overlap_gemm_rate of the library's FP8 GEMM: a GEMM
// on it (PlainGemm::overlap's plain table here is costed as the library's; a fused plan's table is
// the overlap GEMM's) slows by that factor, the library GEMM not at all.
TEST(Fp8Simulator, TheOverlapGemmsFp8MainLoopAtItsMeasuredRate) {
  MachineProfile full, measured;
  full.fp8_overlap_gemm_rate = 1.0;
  measured.fp8_overlap_gemm_rate = 0.5;
  const Problem p = fp8_problem(OpKind::gemm_rs, 2, Scaling::row, 8192, 8192, 8192);
  const Plan fused = make_plan(find_strategy("fused"), p), sequential = make_plan(find_strategy("sequential"), p);
  EXPECT_GT(simulate(fused, measured).seconds, 1.3 * simulate(fused, full).seconds);
  EXPECT_DOUBLE_EQ(simulate(sequential, measured).seconds, simulate(sequential, full).seconds);
}

}  // namespace
}  // namespace weft
