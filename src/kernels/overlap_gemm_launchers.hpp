// One preparer per compiled tile shape; each lives in its own .cu so the instantiations compile in
// parallel. Internal to the kernels layer: callers use OverlapGemm.
#pragma once

#include "weft/kernels/overlap_gemm.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_64x64(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_64x128(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_64x192(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_64x256(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x96(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x112(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x128(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x192(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x256(const OverlapGemmLaunch& launch);
std::unique_ptr<OverlapGemm::Prepared> prepare_128x128x128_fp8(const OverlapGemmLaunch& launch);

}  // namespace weft::overlap_gemm_detail
