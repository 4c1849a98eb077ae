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
  MachineProfile machine;  // for strategies that pick by the machine (ficco, signal)
  int gemm_sms = 0;                 // signal: --gemm-sms
  bool gemm_cta_per_tile = false;   // signal: --gemm-cta-per-tile
  std::vector<int> wave_partition;  // signal: --partition
  SignalRestore signal_restore = PlanOptions{}.signal_restore;  // signal: --restore
  int comm_chunks = 0;              // fused: --comm-chunks
  AllGatherSource all_gather_source = AllGatherSource::pull;  // decomposed: --ag-source
  ChunkedOptions chunked;           // chunked: --template, --chunks, --backend, --comm-sms, --group-size
  TileLinkOptions tilelink;         // tilelink: --comm-sms, --comm-tile-rows, --order
  bool moe_grouped_gemm = true;     // sequential MoE: off with --per-expert-moe-gemm
};

// Returns the number of rows whose verification failed.
int run_gpu_bench(const BenchSuite& suite, const GpuBenchOptions& options);

}  // namespace weft::cli
