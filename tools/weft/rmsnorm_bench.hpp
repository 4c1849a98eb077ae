// `weft bench rmsnorm` on one GPU: FlashOverlap's Table 4. For each suite row that `signal` builds a
// plan for, RMSNorm of the restored result against RMSNorm reading the result where the plan left
// it (the remap fused into the load; tile level for AR/RS, token level for A2A), and the restore
// steps plus plain RMSNorm, which is what the fused kernel saves.
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"
#include "weft/model/machine_profile.hpp"

namespace weft::cli {

struct RmsnormBenchOptions {
  int world = 2;  // the rows are cut and the plan built for this many ranks; rank 0's result is used
  int warmup = 5;
  int iterations = 50;
  uint64_t seed = 1;
  MachineProfile machine;
  std::string csv_path;
};

// Returns the number of rows whose fused result differed from the plain one.
int run_rmsnorm_bench(const std::vector<BenchSuite>& suites, const RmsnormBenchOptions& options);

}  // namespace weft::cli
