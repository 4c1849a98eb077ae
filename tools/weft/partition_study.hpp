// `weft tune --partitions`: FlashOverlap's predictive search checked against measurement
// (flashoverlap.txt Section 4, Algorithm 1). For each suite row (gemm_ar, gemm_rs) and world size it
// times the signal GEMM alone (the offline GEMM duration), then runs the `signal` plan for a set of
// wave partitions — every candidate (|G1| <= 2, |GP| <= 4) when there are few, else the searched one,
// uniform ones and a deterministic sample — each verified against `sequential`, and prints predicted
// vs measured time per partition, the mean absolute error ratio, and the searched partition's
// measured time against the best measured one.
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"
#include "weft/model/machine_profile.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::cli {

struct PartitionStudyOptions {
  std::vector<int> world_sizes;
  std::vector<OpKind> ops;
  int warmup = 3;
  int iterations = 20;
  int max_partitions = 12;  // per row and world size
  uint64_t seed = 1;
  std::string csv_path;
  MachineProfile machine;
  int gemm_sms = 0;
  SignalRestore signal_restore = PlanOptions{}.signal_restore;
};

// Returns the number of partitions whose result did not match sequential.
int run_partition_study(const BenchSuite& suite, const PartitionStudyOptions& options);

}  // namespace weft::cli
