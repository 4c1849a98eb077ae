#include <stdexcept>

#include "weft/core/plan_builders.hpp"

namespace weft {

bool Strategy::supports(OpKind op) const {
  for (OpKind o : ops)
    if (o == op) return true;
  return false;
}

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {
      {"sequential", "-", "library GEMM, then the NCCL collective: the baseline every figure is measured against",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a}, plan_sequential},
      {"decomposed", "AsyncTP",
       "per-shard GEMMs on one stream, per-shard copy-engine or NCCL transfers on another, ordered by signals",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a}, plan_decomposed},
  };
  return all;
}

const Strategy& find_strategy(std::string_view name) {
  std::string known;
  for (const auto& s : strategies()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw std::invalid_argument("unknown strategy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace weft
