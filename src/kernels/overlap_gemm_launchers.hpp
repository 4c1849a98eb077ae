// One launcher per compiled tile shape; each lives in its own .cu so the instantiations compile in
// parallel. Internal to the kernels layer: callers use launch_overlap_gemm.
#pragma once

#include "weft/kernels/overlap_gemm.hpp"

namespace weft::overlap_gemm_detail {

void launch_128x128(const OverlapGemmLaunch& launch, cudaStream_t stream);
void launch_128x256(const OverlapGemmLaunch& launch, cudaStream_t stream);

}  // namespace weft::overlap_gemm_detail
