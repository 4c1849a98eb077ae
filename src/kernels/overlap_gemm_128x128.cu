// The overlap GEMM with 128x128x64 tiles (see overlap_gemm_kernel.cuh).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x128(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<128, 128, 64, /*Exchangeable=*/true, /*Clusterable=*/true, /*Deepenable=*/true, /*LargerClusters=*/true>(launch);
}

}  // namespace weft::overlap_gemm_detail
