// `weft bench` on GPUs: for each world size, suite row and strategy, verify the strategy's result
// against `sequential` and time GEMM alone, communication alone, sequential and the strategy.
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"
#include "weft/model/machine_profile.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::cli {

struct GpuBenchOptions {
  std::vector<int> world_sizes;
  std::vector<std::string> strategies;  // besides `sequential`, which is always measured
  std::vector<OpKind> ops;
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  std::string json_path;
  std::string csv_path;
  // The operands: bf16, or e4m3 with tensor or row scales (every input's scales the caller's too).
  DType dtype = DType::bf16;
  Scaling scaling = Scaling::none;
  // The knobs as `weft plan` reads them (arguments.hpp plan_options_from): the machine profile,
  // auto's tuning table, signal's, fused's, chunked's and tilelink's options. One copy, so that
  // auto here chooses as a caller's weft::Op does (it once lost the tuning table on the way).
  PlanOptions plan;
};

// Returns the number of rows whose verification failed.
int run_gpu_bench(const BenchSuite& suite, const GpuBenchOptions& options);

}  // namespace weft::cli
