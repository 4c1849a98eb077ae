// Which plans the CUDA executor can run for their dtypes, decided on the CPU: the one home of that
// decision. The executor refuses a step with the reason given here before lowering it
// (runtime/lowering/dtypes.cpp); make_plan declines such a plan where PlanOptions::gpu_lowerable_only
// asks (weft::Op does, so an FP8 op declines at construction and auto passes over the strategy).
//
// What the executor lowers for FP8 so far: a GEMM whose tile table is plain (is_plain_tile_table,
// run by cuBLASLt's FP8 matmul) with B row-major [N, K] and, where block-scaled, operands that are
// whole buffers (the scales of a sub-box are not addressed yet) of rows a multiple of 4 (cuBLASLt's
// block-scaled matmul has no algorithm for others); NCCL all-gathers and copies (the copy engine's)
// of FP8 rows with tensor or row scales (the scales move with the rows; a caller's FP8 input kept in
// symmetric memory is copied in with its scales); and otherwise data movement only of bf16 (the
// partial sums an FP8 GEMM gives in bf16, never f32). Nothing else moves FP8 rows or their scales
// (all_to_all, row permutations, box moves, block-scaled rows). A GEMM on the overlap GEMM (a table
// that waits, notifies or stores elsewhere, or PlainGemm::overlap) runs its FP8 main loop: e4m3 A and
// B [N, K] with tensor or row scales (applied in the epilogue), 128x128 or 64x128 tiles (the FP8
// tiling, model/tiling.hpp; alone or in clusters of two), bf16 stores and addends, not exchanged.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/ir/plan.hpp"

namespace weft {

struct GpuLoweringOptions {
  // ExecutorOptions::PlainGemm::overlap: plain tables run on the overlap GEMM too.
  bool plain_gemm_on_overlap = false;
};

// Why the executor cannot lower `step` (of one of the plan's ranks) for the dtypes it touches, naming
// the step and what is missing; empty where it can.
std::optional<std::string> gpu_step_gap(const Plan& plan, const Step& step, bool plain_gemm_on_overlap);

// The first such gap of any rank's step; empty where the executor runs the plan.
std::optional<std::string> gpu_lowering_gap(const Plan& plan, const GpuLoweringOptions& options);

}  // namespace weft
