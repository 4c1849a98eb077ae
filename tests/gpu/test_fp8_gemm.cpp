// The FP8 library GEMM (cuBLASLt's FP8 matmul with A and B scales) on one GPU, in every scaling mode,
// against the fp32 (double) reference of the scaled product on random inputs quantized as the CPU
// reference quantizes them; the output poisoned (NaN) before each call. And the executor's refusals
// where an FP8 plan needs a step it has no FP8 lowering for.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "../support/device_matrices.hpp"
#include "../support/expect_refused.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/reference/fp8.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"

namespace weft {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

// An FP8 input of the executor (elements and scales, in the executor's device layouts) from the
// reference's host matrices.
void upload_operand(CudaExecutor& exec, const Problem& p, const std::string& name, const HostMatrix& values, const HostMatrix& scales) {
  const RankPlan& rp = exec.rank_plan();
  const BufferDecl& decl = rp.buffers.at(static_cast<size_t>(find_buffer(rp, name)));
  std::vector<uint8_t> bytes(values.data.size());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = fp8_bits(values.data[i], decl.dtype);
  WEFT_CUDA_CHECK(cudaMemcpy(exec.buffer(name), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  const ScaleGrid grid = *scale_grid(p, decl);
  std::vector<float> device(static_cast<size_t>(device_scale_count(grid, decl.rows, decl.cols)), 0.0f);
  for (int64_t r = 0; r < scales.rows; ++r)
    for (int64_t c = 0; c < scales.cols; ++c)
      device[static_cast<size_t>(device_scale_index(grid, decl.rows, decl.cols, ScaleCell{r, c}))] = scales.at(r, c);
  WEFT_CUDA_CHECK(cudaMemcpy(exec.buffer(scale_name(name)), device.data(), device.size() * sizeof(float), cudaMemcpyHostToDevice));
}

HostMatrix download_output(CudaExecutor& exec, DType dtype) {
  const DeviceRegion out = exec.output();
  return test_support::download_bf16_or_f32(out.data, out.rows, out.cols, out.stride, dtype);
}

struct Fp8Case {
  Scaling scaling;
  DType a, b, out;
};

class Fp8LibraryGemm : public testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8LibraryGemm, MatchesTheScaledProduct) {
  const Fp8Case c = GetParam();
  auto group = Communicator::local_group({0});
  // Aligned, and ragged: 3 K blocks, which the block scales' layouts pad to 4 (a wrong padding shows
  // here), with 200 and 204 rows (multiples of 4, not of 128) and 202, then N ragged (136: a partial
  // 128x128 block of B). Block scales with 202 rows: cuBLASLt has no algorithm, and the executor
  // refuses the plan before lowering it (plan/gpu_lowering.hpp), naming the padding. Each shape is
  // checked whether or not another failed.
  const int64_t shapes[][3] = {{256, 512, 1024}, {200, 256, 384}, {204, 256, 384}, {202, 256, 384}, {256, 136, 384}};
  for (const auto& shape : shapes) try {
    Problem p;
    p.op = OpKind::gemm_ar;
    p.m = shape[0];
    p.n = shape[1];
    p.k = shape[2];
    p.input_dtype = c.a;
    p.b_dtype = c.b;
    p.output_dtype = c.out;
    p.scaling = c.scaling;
    SCOPED_TRACE(describe(p));
    if (c.scaling == Scaling::block && p.m % 4 != 0) {
      test_support::expect_refused([&] { CudaExecutor exec(*group[0], plan_gemm_alone(p, PlanOptions{}, "sequential")); }, "multiples of 4");
      continue;
    }
    CudaExecutor exec(*group[0], plan_gemm_alone(p, PlanOptions{}, "sequential"));
    const auto inputs = random_inputs(p, 7);
    upload_operand(exec, p, "A", inputs[0].at("A"), inputs[0].at("A_scale"));
    upload_operand(exec, p, "B", inputs[0].at("B"), inputs[0].at("B_scale"));
    const HostMatrix want = expected_outputs(p, inputs)[0], scale = expected_magnitudes(p, inputs)[0];
    cudaStream_t stream;
    WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
    for (int call = 0; call < 2; ++call) {
      const DeviceRegion out = exec.output();
      WEFT_CUDA_CHECK(cudaMemset2D(out.data, static_cast<size_t>(out.stride) * dtype_bytes(c.out), 0xff,
                                   static_cast<size_t>(out.cols) * dtype_bytes(c.out), static_cast<size_t>(out.rows)));  // NaN
      exec.run(stream);
      exec.finish(stream);
      // bf16: its rounding of each element (2^-8 relative, with margin); f32: cuBLASLt's fp32
      // accumulation against double.
      const double tolerance = c.out == DType::bf16 ? 8e-3 : 1e-4;
      EXPECT_LE(relative_error(download_output(exec, c.out), want, scale), tolerance);
    }
    WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    ADD_FAILURE() << shape[0] << "x" << shape[1] << "x" << shape[2] << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    ScalingModes, Fp8LibraryGemm,
    testing::Values(Fp8Case{Scaling::tensor, DType::e4m3, DType::e4m3, DType::bf16}, Fp8Case{Scaling::tensor, DType::e4m3, DType::e4m3, DType::f32},
                    Fp8Case{Scaling::row, DType::e4m3, DType::e4m3, DType::bf16}, Fp8Case{Scaling::row, DType::e5m2, DType::e4m3, DType::bf16},
                    Fp8Case{Scaling::block, DType::e4m3, DType::e4m3, DType::bf16}, Fp8Case{Scaling::block, DType::e4m3, DType::e4m3, DType::f32}),
    [](const testing::TestParamInfo<Fp8Case>& info) {
      return std::string(to_string(info.param.scaling)) + "_" + std::string(to_string(info.param.a)) + "x" + std::string(to_string(info.param.b)) +
             "_to_" + std::string(to_string(info.param.out));
    });

// Steps the executor has no FP8 form for are refused at construction, naming what is missing: the
// overlap GEMM's FP8 mainloop. The AllGather of FP8 rows and their scales has one (sequential builds).
TEST(Fp8Refusals, StepsWithoutAnFp8LoweringAreRefusedByName) {
  auto group = Communicator::local_group({0});
  Problem p;
  p.op = OpKind::ag_gemm;
  p.m = 128;
  p.n = 256;
  p.k = 256;
  p.input_dtype = DType::e4m3;
  p.scaling = Scaling::row;
  PlanOptions keep;
  keep.keep_strategy_at_world_one = true;
  auto construct = [&](const Plan& plan, const ExecutorOptions& options = {}) {
    return error_of([&] { CudaExecutor exec(*group[0], plan, options); });
  };
  const std::string gather = construct(make_plan(find_strategy("sequential"), p, keep));
  EXPECT_EQ(gather, "") << "sequential's FP8 all_gather (rows and row scales) lowers";
  // fused: its copies of FP8 rows or its overlap GEMM, whichever comes first.
  const std::string fused = construct(make_plan(find_strategy("fused"), p, keep));
  EXPECT_TRUE(fused.find("no FP8 mainloop") != std::string::npos || fused.find("no lowering yet") != std::string::npos) << fused;
  ExecutorOptions on_overlap;
  on_overlap.plain_gemm = ExecutorOptions::PlainGemm::overlap;
  const std::string plain = construct(plan_gemm_alone(p, PlanOptions{}, "sequential"), on_overlap);
  EXPECT_NE(plain.find("no FP8 mainloop"), std::string::npos) << plain;
}

}  // namespace
}  // namespace weft
