// The FP8 library GEMM (cuBLASLt's FP8 matmul with A and B scales) on one GPU, in every scaling mode,
// against the fp32 (double) reference of the scaled product on random inputs quantized as the CPU
// reference quantizes them; the output poisoned (NaN) before each call. Then FP8 on the overlap GEMM
// through the executor, and its refusals by name.
#include <gtest/gtest.h>

#include <array>
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

// FP8 on the overlap GEMM through the executor, at world 1 on the strategies' own tables: a plain
// table put there (PlainGemm::overlap), fused ag_gemm (the GEMM waits for the copy of A's rows and
// their scales), signal and chunked gemm_ar (notifies), in tensor and row scaling, aligned and ragged: each against the scaled product in double,
// into a poisoned output, two calls of one executor. Sequential's FP8 all_gather lowers; block
// scales and a tile the FP8 main loop is not compiled for are refused by name.
TEST(Fp8OverlapGemm, TablesThatWaitNotifyOrStoreElsewhereMatchTheScaledProduct) {
  auto group = Communicator::local_group({0});
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  PlanOptions keep;
  keep.keep_strategy_at_world_one = true;
  ExecutorOptions on_overlap;
  on_overlap.plain_gemm = ExecutorOptions::PlainGemm::overlap;
  struct Case {
    const char* strategy;
    OpKind op;
  };
  for (const Scaling scaling : {Scaling::tensor, Scaling::row})
    for (const auto& shape : {std::array<int64_t, 3>{256, 512, 1024}, std::array<int64_t, 3>{200, 264, 400}})
      for (const Case c : {Case{"plain", OpKind::gemm_ar}, Case{"fused", OpKind::ag_gemm}, Case{"signal", OpKind::gemm_ar}, Case{"chunked", OpKind::gemm_ar}}) try {
        Problem p;
        p.op = c.op;
        p.m = shape[0];
        p.n = shape[1];
        p.k = shape[2];
        p.input_dtype = DType::e4m3;
        p.scaling = scaling;
        SCOPED_TRACE(std::string(c.strategy) + " " + describe(p));
        const bool plain = std::string(c.strategy) == "plain";
        PlanOptions tiles;
        tiles.tile_m = tiles.tile_n = 128;
        const Plan plan = plain ? plan_gemm_alone(p, tiles, "sequential") : make_plan(find_strategy(c.strategy), p, keep);
        // Which of these tables wait or notify at world 1 (fused ag_gemm at 256 rows, signal and chunked
        // gemm_ar) is tests/cpu/test_fp8_op.cpp's KeptAtWorldOneTheirTablesWaitOrNotifyAndLower; a plain
        // one runs on the overlap GEMM too (PlainGemm::overlap).
        CudaExecutor exec(*group[0], plan, on_overlap);
        const auto inputs = random_inputs(p, 11);
        upload_operand(exec, p, "A", inputs[0].at("A"), inputs[0].at("A_scale"));
        upload_operand(exec, p, "B", inputs[0].at("B"), inputs[0].at("B_scale"));
        const HostMatrix want = expected_outputs(p, inputs)[0], scale = expected_magnitudes(p, inputs)[0];
        for (int call = 0; call < 2; ++call) {
          const DeviceRegion out = exec.output();
          WEFT_CUDA_CHECK(cudaMemset2D(out.data, static_cast<size_t>(out.stride) * 2, 0xff, static_cast<size_t>(out.cols) * 2,
                                       static_cast<size_t>(out.rows)));  // NaN
          exec.run(stream);
          exec.finish(stream);
          EXPECT_LE(relative_error(download_output(exec, DType::bf16), want, scale), 8e-3) << "call " << call;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.strategy << " " << to_string(c.op) << " " << to_string(scaling) << " " << shape[0] << "x" << shape[1] << "x" << shape[2]
                      << ": " << e.what();
      }
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));

  Problem p;
  p.op = OpKind::ag_gemm;
  p.m = 128;
  p.n = 256;
  p.k = 256;
  p.input_dtype = DType::e4m3;
  p.scaling = Scaling::row;
  auto construct = [&](const Plan& plan, const ExecutorOptions& options = {}) {
    return error_of([&] { CudaExecutor exec(*group[0], plan, options); });
  };
  EXPECT_EQ(construct(make_plan(find_strategy("sequential"), p, keep)), "") << "sequential's FP8 all_gather (rows and row scales) lowers";
  PlanOptions wide;
  wide.tile_m = 128;
  wide.tile_n = 256;
  const std::string other_tile = construct(plan_gemm_alone(p, wide, "sequential"), on_overlap);
  EXPECT_NE(other_tile.find("128x256 tiles; its FP8 main loop is compiled for 128x128 and 64x128 only"), std::string::npos) << other_tile;
  p.scaling = Scaling::block;
  const std::string block = construct(plan_gemm_alone(p, PlanOptions{}, "sequential"), on_overlap);
  EXPECT_NE(block.find("applies tensor and row scales only"), std::string::npos) << block;
}

}  // namespace
}  // namespace weft
