// Plans made from plans, for measuring how a design's pieces behave (FiCCO's characterisation,
// ficco.txt Section IV): the same GEMMs cut into row or K pieces, whose time against the whole
// GEMM's is the decomposition loss.
//
//   Plan pieces = split_gemms(plan, GemmSplitAxis::rows, 4);   // every GEMM as 4 row GEMMs
//
// The result validates and computes what the plan computes (the tests prove it on the CPU).
#pragma once

#include "weft/core/plan.hpp"

namespace weft {

enum class GemmSplitAxis { rows, k };

// Each GEMM step (plain tile table) becomes `parts` GEMMs on the same stream, one after another:
// by rows of A and C, or by K (later pieces accumulate; cuts on multiples of 64 so that every
// piece's operands stay 16-byte aligned, so at most one piece per 64-deep slice). The first piece
// keeps the step's waits, the last its notifies. Throws std::invalid_argument for tables with
// waits, notifies or remapped stores.
Plan split_gemms(const Plan& plan, GemmSplitAxis axis, int parts);

}  // namespace weft
