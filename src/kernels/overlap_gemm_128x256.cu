// The overlap GEMM with 128x256x64 tiles (see overlap_gemm_kernel.cuh).
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

void launch_128x256(const OverlapGemmLaunch& launch, cudaStream_t stream) { launch_with_tile<128, 256, 64>(launch, stream); }

}  // namespace weft::overlap_gemm_detail
