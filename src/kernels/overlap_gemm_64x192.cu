// The overlap GEMM with 64x192x128 tiles (see overlap_gemm_kernel.cuh): one consumer warp group per
// tile, for GEMMs of at most 64 rows (a 128-row tile would do twice the MMA work); 128 deep in K,
// so that each load reads 256-byte runs of B's rows (model/tiling.cpp has the figures).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_64x192(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<64, 192, 128>(launch);
}

}  // namespace weft::overlap_gemm_detail
