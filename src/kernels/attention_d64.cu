// The attention kernel at head dim 64 (attention_launchers.hpp has its tiling).
#include "attention_kernel.cuh"
#include "attention_launchers.hpp"

namespace weft::attention_detail {

std::unique_ptr<Attention::Prepared> prepare_d64(const AttentionLaunch& launch) {
  constexpr AttentionTiling t = kTilingD64;
  return std::make_unique<PreparedAttention<t.head_dim, t.tile_q, t.tile_kv, t.stages>>(launch);
}

}  // namespace weft::attention_detail
