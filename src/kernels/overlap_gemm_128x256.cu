// The overlap GEMM with 128x256x64 tiles (see overlap_gemm_kernel.cuh).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x256(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<128, 256, 64, /*Exchangeable=*/false, /*Clusterable=*/true, /*Deepenable=*/true>(launch);
}

}  // namespace weft::overlap_gemm_detail
