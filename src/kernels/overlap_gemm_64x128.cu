// The overlap GEMM with 64x128x128 tiles (see overlap_gemm_kernel.cuh): one consumer warp group per
// tile, for GEMMs of at most 64 rows (a 128-row tile would do twice the MMA work); 128 deep in K,
// so that each load reads 256-byte runs of B's rows (model/tiling.cpp has the figures). With FP8
// operands (OverlapGemmLaunch::fp8) the same tile runs the FP8 main loop: 128 e4m3 elements of K per
// stage, as FP8's 128x128x128.
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_64x128(const OverlapGemmLaunch& launch) {
  if (launch.fp8) {
    if (launch.store_transposed || launch.b_n_major || launch.cluster_m * launch.cluster_n > 1)
      throw std::invalid_argument("overlap GEMM: FP8 on 64x128x128 runs the K-major, untransposed, unclustered product only");
    return std::make_unique<PreparedWithTile<64, 128, 128, false, false, 1, 1, cutlass::float_e4m3_t>>(launch);
  }
  return prepare_with_tile<64, 128, 128>(launch);
}

}  // namespace weft::overlap_gemm_detail
