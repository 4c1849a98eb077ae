// `weft bench tilelink` (TileLink's microbenchmark, one GPU; a peer pull where a second GPU is
// visible): the companion kernel's copy bandwidth against the CTAs it runs on, and the overlap
// GEMM's slowdown against the SMs given to communication, alone (fewer SMs) and with the companion
// copying beside it on those SMs (contention for memory and L2).
#pragma once

#include <string>
#include <vector>

#include "weft/model/machine_profile.hpp"

namespace weft::cli {

struct TilelinkBenchOptions {
  std::vector<int> ctas = {1, 2, 4, 8, 16, 20, 32, 66, 132};  // companion CTAs for the copy table
  std::vector<int> comm_sms = {0, 8, 16, 20, 32, 66};         // SMs given to communication for the GEMM table
  std::vector<std::vector<int64_t>> gemms = {{8192, 8192, 8192}, {2048, 11008, 4096}, {4096, 8192, 8192}};
  int64_t copy_mib = 256;     // bytes each copy moves
  int64_t comm_tile_rows = 1024;
  int warmup = 5;
  int iterations = 20;
  MachineProfile machine;
  std::string csv_path;
};

// Returns the number of checks that failed (a copy whose result differs from its source).
int run_tilelink_bench(const TilelinkBenchOptions& options);

}  // namespace weft::cli
