// `weft characterize`: FiCCO's decomposition and contention losses (ficco.txt Section IV) for the
// AllGather+GEMM rows of a suite, on the local GPUs. Per row and world size W, on every rank:
//   DIL: the rank's GEMM ((W*m) x n x k) cut 1/W and 1/W^2 ways by rows and by K, run one piece
//        after another, against the whole GEMM (loss = T_pieces / T_whole - 1);
//   CIL: the whole GEMM concurrent with the all-gather done by copy engines (W-way, the
//        decomposed plan's pulls) or by NCCL, against the slower of the two alone
//        (loss = T_together / max(T_gemm, T_comm) - 1).
// A table on stdout and `--csv FILE`; scripts/plot_characterize.py draws the CSV as a PNG.
#pragma once

#include <string>
#include <vector>

#include "bench_suite.hpp"

namespace weft::cli {

struct CharacterizeOptions {
  std::vector<int> world_sizes;
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  std::string csv_path;
};

void run_characterize(const BenchSuite& suite, const CharacterizeOptions& options);

}  // namespace weft::cli
