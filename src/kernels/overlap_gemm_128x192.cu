// The overlap GEMM with 128x192x64 tiles (see overlap_gemm_kernel.cuh): for shapes where 128x256
// tiles fill the SMs badly (m = 512, n = 12288 on 132 SMs: 192 tiles are 1.45 waves, 256 tiles of
// 192 columns are 1.94).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x192(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<128, 192, 64, /*Exchangeable=*/true>(launch);
}

}  // namespace weft::overlap_gemm_detail
