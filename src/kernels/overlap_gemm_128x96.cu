// The overlap GEMM with 128x96x64 tiles (see overlap_gemm_kernel.cuh): for memory-bound GEMMs
// whose wider tiles would leave SMs idle (m = 64, n = 12288: 128 tiles instead of 96 or 48).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x96(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<128, 96, 64, /*Exchangeable=*/true>(launch);
}

}  // namespace weft::overlap_gemm_detail
