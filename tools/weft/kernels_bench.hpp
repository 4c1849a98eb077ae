// `weft bench kernels` (one GPU): the auxiliary kernels the plans run around the GEMM — SM copy,
// slot reduction, row permutation, box moves (signal's restore), MoE's top-k combine and RMSNorm —
// at the sizes the suites' rows give them, each against the copy engine moving the same bytes
// (cudaMemcpyAsync device to device: the memory roofline at that size). Each kernel's output is
// poisoned first and checked after (exact where the kernel moves data, against a second computation
// where it sums).
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"

namespace weft::cli {

struct KernelsBenchOptions {
  int world = 4;  // the suites' rows are cut for this many ranks
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  std::string csv_path;
};

// Returns the number of checks that failed.
int run_kernels_bench(const std::vector<BenchSuite>& suites, const KernelsBenchOptions& options);

}  // namespace weft::cli
