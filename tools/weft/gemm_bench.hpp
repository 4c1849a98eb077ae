// `weft bench gemm` on one GPU: the overlap GEMM (empty table; notify + remapped stores) against
// cuBLASLt over the GEMM shapes of the suites' rows at a world size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_suite.hpp"
#include "weft/ir/tile_grid.hpp"
#include "weft/model/tiling.hpp"

namespace weft::cli {

// C [m, n] = A [m, k] B [n, k]^T on one rank.
struct GemmShape {
  int64_t m, n, k;
  auto operator<=>(const GemmShape&) const = default;
};

struct GemmBenchOptions {
  int world = 4;  // the suites' rows are cut for this many ranks; the GEMM of one rank is timed
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  std::string csv_path;
  Raster raster = Raster::along_m;  // the order of the tables' tiles
  int swizzle = 8;
  std::vector<GemmShape> shapes;  // when not empty, these shapes instead of the suites'
  TileRates tile_rates;           // the tiling rule's measured rates (--machine), else its estimates
  // e4m3 (with tensor or row scaling): the overlap GEMM's FP8 main loop (128x128) against cuBLASLt's FP8 matmul.
  DType dtype = DType::bf16;
  Scaling scaling = Scaling::none;
};

// Returns the number of shapes whose results did not match cuBLASLt.
int run_gemm_bench(const std::vector<BenchSuite>& suites, const GemmBenchOptions& options);

}  // namespace weft::cli
