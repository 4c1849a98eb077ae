// The attention kernel's compiled tilings and their preparers, one .cu per head dim so that the
// instantiations compile in parallel. Internal to the kernels layer: callers use Attention.
#pragma once

#include "weft/kernels/attention.hpp"

namespace weft::attention_detail {

// Query rows x keys per stage, and stages. Head dim 64 uses 192-row query tiles (three consumer
// warp groups taking turns, as FA3 runs d64), 128 uses 128-row ones (two); both 128-key stages
// (S = 64 x 128 fp32 per warp group beside O: 64 + head_dim / 2 accumulator registers a thread);
// the stages are what shared memory leaves beside the Q tile: 4 of 32 KiB at head dim 64, 3 of 64
// KiB at 128.
inline constexpr AttentionTiling kTilingD64{64, 192, 128, 4};
inline constexpr AttentionTiling kTilingD128{128, 128, 128, 3};

std::unique_ptr<Attention::Prepared> prepare_d64(const AttentionLaunch& launch);
std::unique_ptr<Attention::Prepared> prepare_d128(const AttentionLaunch& launch);

}  // namespace weft::attention_detail
