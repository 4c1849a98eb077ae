// `weft plan --summary`: a plan too large to read step by step, told in one line per rank (steps
// by kind, GEMM tiles, waits and notifies, bytes moved) and a total.
#pragma once

#include <string>

#include "weft/ir/plan.hpp"

namespace weft::cli {

std::string plan_summary(const Plan& plan);

}  // namespace weft::cli
