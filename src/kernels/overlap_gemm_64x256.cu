// The overlap GEMM with 64x256x64 tiles (see overlap_gemm_kernel.cuh): one consumer warp group per
// tile, for GEMMs of at most 64 rows, where a 128-row tile would do twice the MMA work.
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_64x256(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<64, 256, 64>(launch);
}

}  // namespace weft::overlap_gemm_detail
