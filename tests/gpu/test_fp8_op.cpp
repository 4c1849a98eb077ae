// weft::Op with FP8 operands on one GPU: the caller's A and B with their scales bound per call
// (two sets of buffers alternating, so a call whose scales moved reads the new ones, and a replayed
// call the right ones), every scaling mode, bf16 and f32 results, against the double reference of
// the scaled product on random inputs quantized as the CPU reference quantizes them; the output
// poisoned (0xff bytes: NaN) before each call. And the errors raised before launching: scales
// missing or of the wrong count, and a strategy whose FP8 plan has no lowering declining. Strategies
// kept at world 1 run their GEMM on the overlap GEMM's FP8 main loop.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "../support/device_matrices.hpp"
#include "weft/plan/op_arguments.hpp"
#include "weft/reference/fp8.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/cuda_executor.hpp"
#include "weft/runtime/op.hpp"

namespace weft {
namespace {

struct DeviceMemory {
  void* data = nullptr;
  explicit DeviceMemory(size_t bytes) { WEFT_CUDA_CHECK(cudaMalloc(&data, std::max<size_t>(bytes, 16))); }
  ~DeviceMemory() { cudaFree(data); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

// An FP8 operand of a call: its elements and its scales in device_scale_index's layout.
struct Fp8Operand {
  DeviceMemory values, scales;
  int64_t scale_count;
  Fp8Operand(const HostMatrix& v, const HostMatrix& s, DType dtype, const ScaleGrid& grid)
      : values(v.data.size()), scales(static_cast<size_t>(device_scale_count(grid, v.rows, v.cols)) * sizeof(float)),
        scale_count(device_scale_count(grid, v.rows, v.cols)) {
    std::vector<uint8_t> bytes(v.data.size());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = fp8_bits(v.data[i], dtype);
    WEFT_CUDA_CHECK(cudaMemcpy(values.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    std::vector<float> device(static_cast<size_t>(scale_count), 0.0f);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) device[static_cast<size_t>(device_scale_index(grid, v.rows, v.cols, ScaleCell{r, c}))] = s.at(r, c);
    WEFT_CUDA_CHECK(cudaMemcpy(scales.data, device.data(), device.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
};

HostMatrix download(const void* c, int64_t rows, int64_t cols, DType dtype) {
  return test_support::download_bf16_or_f32(c, rows, cols, cols, dtype);
}

struct Case {
  Scaling scaling;
  DType out;
  OpKind op;
  const char* strategy = "";  // kept at world 1 where named (its GEMM then the overlap GEMM's FP8 main loop)
};

class Fp8Op : public testing::TestWithParam<Case> {};

TEST_P(Fp8Op, CallerBuffersAndScalesMatchTheScaledProduct) {
  const Case c = GetParam();
  auto group = Communicator::local_group({0});
  OpSpec spec;
  spec.op = c.op;
  // Ragged rows and N, and 3 K blocks (the block scales' padding to 4 shows); block scaling on whole
  // 128-blocks of rows and N (cuBLASLt's block-scaled FP8 has no algorithm at some ragged shapes, a
  // question of the library GEMM's own, tests/gpu/test_fp8_gemm.cpp).
  const bool block = c.scaling == Scaling::block;
  spec.n = block ? 256 : 272;
  spec.k = 384;
  spec.max_rows = 256;
  spec.input_dtype = DType::e4m3;
  spec.output_dtype = c.out;
  spec.scaling = c.scaling;
  if (*c.strategy) {
    spec.strategy = c.strategy;
    spec.plan.keep_strategy_at_world_one = true;
  }
  Op op(*group[0], spec);
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  // Two sets of inputs, called 0, 1, 0, 1: a set's second call may replay a captured graph.
  const int64_t rows = block ? 256 : 202;
  Problem p;
  p.op = c.op;
  p.m = rows;
  p.n = spec.n;
  p.k = spec.k;
  p.input_dtype = DType::e4m3;
  p.output_dtype = c.out;
  p.scaling = c.scaling;
  const ScaleGrid a_grid = *operand_scale_grid(p, Operand::a), b_grid = *operand_scale_grid(p, Operand::b);
  struct Set {
    std::unique_ptr<Fp8Operand> a, b;
    HostMatrix want, magnitude;
  };
  std::vector<Set> sets;
  for (uint64_t seed : {11u, 12u}) {
    const auto inputs = random_inputs(p, seed);
    Set s;
    s.a = std::make_unique<Fp8Operand>(inputs[0].at("A"), inputs[0].at("A_scale"), DType::e4m3, a_grid);
    s.b = std::make_unique<Fp8Operand>(inputs[0].at("B"), inputs[0].at("B_scale"), DType::e4m3, b_grid);
    s.want = expected_outputs(p, inputs)[0];
    s.magnitude = expected_magnitudes(p, inputs)[0];
    sets.push_back(std::move(s));
  }
  DeviceMemory out(static_cast<size_t>(rows * spec.n) * dtype_bytes(c.out));
  for (int call = 0; call < 4; ++call) {
    const Set& s = sets[static_cast<size_t>(call % 2)];
    WEFT_CUDA_CHECK(cudaMemset(out.data, 0xff, static_cast<size_t>(rows * spec.n) * dtype_bytes(c.out)));  // NaN
    RunArgs args;
    args.a = s.a->values.data;
    args.b = s.b->values.data;
    args.c = out.data;
    args.rows = rows;
    args.scale_a = static_cast<const float*>(s.a->scales.data);
    args.scale_b = static_cast<const float*>(s.b->scales.data);
    args.scale_a_count = s.a->scale_count;
    args.scale_b_count = s.b->scale_count;
    op.run(args, stream);
    op.finish(stream);
    const double tolerance = c.out == DType::bf16 ? 8e-3 : 1e-4;
    EXPECT_LE(relative_error(download(out.data, rows, spec.n, c.out), s.want, s.magnitude), tolerance) << "call " << call;
  }
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(ScalingModes, Fp8Op,
                         testing::Values(Case{Scaling::tensor, DType::bf16, OpKind::gemm_ar}, Case{Scaling::tensor, DType::f32, OpKind::gemm_rs},
                                         Case{Scaling::row, DType::bf16, OpKind::gemm_rs}, Case{Scaling::row, DType::f32, OpKind::ag_gemm},
                                         Case{Scaling::block, DType::bf16, OpKind::gemm_ar}, Case{Scaling::block, DType::f32, OpKind::gemm_ar},
                                         // The overlap GEMM's FP8 main loop, the caller's scales followed per call.
                                         Case{Scaling::tensor, DType::bf16, OpKind::ag_gemm, "fused"}, Case{Scaling::row, DType::bf16, OpKind::gemm_rs, "fused"},
                                         Case{Scaling::row, DType::bf16, OpKind::gemm_ar, "signal"}, Case{Scaling::tensor, DType::bf16, OpKind::gemm_ar, "chunked"}),
                         [](const testing::TestParamInfo<Case>& param) {
                           return std::string(to_string(param.param.scaling)) + "_" + std::string(to_string(param.param.op)) + "_to_" +
                                  std::string(to_string(param.param.out)) + (*param.param.strategy ? std::string("_") + param.param.strategy : "");
                         });

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

TEST(Fp8OpErrors, ScalesAreCheckedBeforeLaunchAndUnlowerablePlansDecline) {
  auto group = Communicator::local_group({0});
  OpSpec spec;
  spec.op = OpKind::gemm_ar;
  spec.n = 256;
  spec.k = 256;
  spec.max_rows = 128;
  spec.input_dtype = DType::e4m3;
  spec.scaling = Scaling::row;
  Op op(*group[0], spec);
  DeviceMemory a(128 * 256), b(256 * 256), c(128 * 256 * 2), scales(1024 * 4);
  RunArgs args;
  args.a = a.data;
  args.b = b.data;
  args.c = c.data;
  args.rows = 100;
  args.scale_a = static_cast<const float*>(scales.data);
  args.scale_b = static_cast<const float*>(scales.data);
  args.scale_a_count = 100;
  args.scale_b_count = 256;
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  RunArgs missing = args;
  missing.scale_b = nullptr;
  EXPECT_NE(error_of([&] { op.run(missing, stream); }).find("scale_b is null"), std::string::npos);
  RunArgs short_count = args;
  short_count.scale_a_count = 99;
  EXPECT_NE(error_of([&] { op.run(short_count, stream); }).find("scale_a holds 99 scales"), std::string::npos);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess) << "nothing was launched";
  // Block scales on the overlap GEMM (its epilogue applies tensor and row scales): a strategy kept
  // at world 1 that needs it declines at construction, naming why.
  OpSpec fused = spec;
  fused.op = OpKind::ag_gemm;
  fused.scaling = Scaling::block;
  fused.strategy = "fused";
  fused.plan.keep_strategy_at_world_one = true;
  const std::string declined = error_of([&] { Op refused(*group[0], fused); });
  EXPECT_NE(declined.find("strategy 'fused' declines e4m3 here on the GPU"), std::string::npos) << declined;
  WEFT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace weft
