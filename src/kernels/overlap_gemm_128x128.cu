// The overlap GEMM with 128x128x64 tiles (see overlap_gemm_kernel.cuh).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

void launch_128x128(const OverlapGemmLaunch& launch, cudaStream_t stream) { launch_with_tile<128, 128, 64>(launch, stream); }

}  // namespace weft::overlap_gemm_detail
