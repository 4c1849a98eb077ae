// The overlap GEMM with 64x64x128 tiles (see overlap_gemm_kernel.cuh): for m <= 64 over narrow or
// short-K outputs, twice the CTAs of 64x128 without splitting K, whose partial sums are combined in
// a chain at the end of the call (cuBLASLt runs 48x64 and 80x64 tiles there).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_64x64(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<64, 64, 128>(launch);
}

}  // namespace weft::overlap_gemm_detail
