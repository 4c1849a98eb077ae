#include "weft/model/ficco_heuristic.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace weft {

FiccoDecision pick_ficco_schedule(const Problem& p, const MachineProfile& machine) {
  check_problem(p);
  if (p.op != OpKind::ag_gemm && p.op != OpKind::a2a_gemm)
    throw std::invalid_argument("the FiCCO heuristic picks schedules for ag_gemm and a2a_gemm, not " + std::string(to_string(p.op)));
  // The GEMM after the communication: the gathered rows, or the most rows any rank receives (the
  // slowest rank's expert GEMM).
  double m = static_cast<double>(p.world_size) * static_cast<double>(p.m);
  if (p.op == OpKind::a2a_gemm) {
    m = 0;
    for (int r = 0; r < p.world_size; ++r) m = std::max(m, static_cast<double>(output_rows(p, r)));
  }
  const double n = static_cast<double>(p.n), k = static_cast<double>(p.k);
  FiccoDecision d;
  d.memory_traffic = dtype_bytes(p.input_dtype) * (m * k + n * k) + dtype_bytes(p.output_dtype) * m * n;
  d.op_to_byte = 2.0 * m * n * k / d.memory_traffic;
  d.combined = d.op_to_byte * d.memory_traffic / machine.peak_flops;
  d.threshold = machine.ficco_threshold_seconds;
  if (m <= k) d.schedule = FiccoSchedule::uniform_fused_2d;
  else if (d.combined < d.threshold) d.schedule = FiccoSchedule::uniform_fused_1d;
  else if (d.combined > 5.0 * d.threshold) d.schedule = FiccoSchedule::hetero_unfused_1d;
  else d.schedule = FiccoSchedule::hetero_fused_1d;
  return d;
}

}  // namespace weft
