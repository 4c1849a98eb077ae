// FiCCO's schedule heuristic (ficco.txt Section V-C, Figure 12(a)) for AllGather+GEMM and for the
// MoE dispatch (All-to-All+GEMM), whose GEMM is the expert GEMM over the rows a rank receives.
//
//   M <= K                      -> uniform_fused_2d (row cuts would hurt the GEMM more than K cuts)
//   otherwise, from the GEMM's op-to-byte (OTB) and memory traffic (MT) against the machine:
//     combined < threshold      -> uniform_fused_1d  (low DIL, high CIL: for small, memory-light GEMMs)
//     combined > 5 x threshold  -> hetero_unfused_1d (high DIL, low CIL: for large, memory-heavy GEMMs)
//     else                      -> hetero_fused_1d
// The paper combines OTB and MT and compares with the machine's "op-to-byte x memory bandwidth =
// FLOPs" without giving units. OTB x MT is the GEMM's FLOP count and op-to-byte x bandwidth is the
// peak FLOP/s, so we read the comparison as the GEMM's time at peak rate against a time scale,
// the machine profile's `ficco_threshold_seconds` (1 ms by default: FLOPs in GFLOP against a rate in
// TFLOP/s; tuned per machine). The GEMM is the
// per-rank GEMM after the gather: (W*m) x n x k; for a2a_gemm the largest rank's (rows received) x n x k.
#pragma once

#include "weft/model/machine_profile.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

struct FiccoDecision {
  FiccoSchedule schedule = FiccoSchedule::hetero_fused_1d;
  double op_to_byte = 0;      // FLOP per byte of the per-rank GEMM
  double memory_traffic = 0;  // bytes: A, B read once, C written once
  double combined = 0;        // seconds at peak: op_to_byte * memory_traffic / peak_flops
  double threshold = 0;       // seconds
};

// The threshold is machine.ficco_threshold_seconds.
FiccoDecision pick_ficco_schedule(const Problem& problem, const MachineProfile& machine);

}  // namespace weft
