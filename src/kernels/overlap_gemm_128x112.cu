// The overlap GEMM with 128x112x64 tiles (see overlap_gemm_kernel.cuh), for the exchanged product
// where C has 129-224 rows: two 112-row tile columns of C instead of two of 128 (12.5% less MMA work
// at m = 200; cuBLASLt runs m = 200 in 104-row tiles, which CuTe's TMA partitioning of a tile does not
// take: not a multiple of 16), in clusters whose CTAs share the tile of C's B they both need.
// WGMMA's N of 112 is among CuTe's extended SM90 shapes.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#include "overlap_gemm_kernel.cuh"
#include "overlap_gemm_launchers.hpp"

namespace weft::overlap_gemm_detail {

std::unique_ptr<OverlapGemm::Prepared> prepare_128x112(const OverlapGemmLaunch& launch) {
  return prepare_with_tile<128, 112, 64, /*Exchangeable=*/true, /*Clusterable=*/false, /*Deepenable=*/true, /*LargerClusters=*/false,
                           /*ExchangedClusters=*/true>(launch);
}

}  // namespace weft::overlap_gemm_detail
