// The overlap GEMM with FP8 (e4m3) operands on 128x128 tiles, 128 deep in K (see overlap_gemm_kernel.cuh):
// a stage holds as many bytes as bf16's 64-deep one. Alone or in clusters of two (2x1 sharing B's
// tile, 1x2 sharing A's), as the bf16 tiles; one entry per CTA where the table fits the grid (7 stages
// instead of 6: OverlapGemmKernel's OneTilePerCta).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x128x128_fp8(const OverlapGemmLaunch& launch) {
  if (!launch.fp8) throw std::invalid_argument("overlap GEMM: 128x128x128 is compiled for FP8 operands only");
  if (launch.store_transposed || launch.b_n_major)
    throw std::invalid_argument("overlap GEMM: FP8 runs the K-major, untransposed product only");
  if (launch.cluster_m == 2 && launch.cluster_n == 1)
    return prepare_deepest<128, 128, 128, false, false, 2, 1, /*Deepenable=*/true, cutlass::float_e4m3_t>(launch);
  if (launch.cluster_m == 1 && launch.cluster_n == 2)
    return prepare_deepest<128, 128, 128, false, false, 1, 2, /*Deepenable=*/true, cutlass::float_e4m3_t>(launch);
  if (launch.cluster_m * launch.cluster_n > 1)
    throw std::invalid_argument("overlap GEMM: clusters of " + std::to_string(launch.cluster_m) + "x" + std::to_string(launch.cluster_n) +
                                " CTAs; 2x1 and 1x2 are compiled");
  return prepare_deepest<128, 128, 128, false, false, 1, 1, /*Deepenable=*/true, cutlass::float_e4m3_t>(launch);
}

}  // namespace weft::overlap_gemm_detail
