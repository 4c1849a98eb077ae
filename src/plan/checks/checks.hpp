// Internal: the individual analyses behind validate_plan(), each adding PlanErrors to a report.
#pragma once

#include "weft/plan/validation.hpp"

namespace weft::detail {

// Indices, bounds, shapes, symmetric access and collective agreement. Later checks assume these hold.
void check_structure(const Plan& plan, ValidationReport& report);
// Abstract execution in table order; reports every blocked stream when it cannot finish.
void check_liveness(const Plan& plan, ValidationReport& report);
// A kernel holding every SM whose in-kernel waits a step needing SMs raises (sm_holding.cpp).
void check_sm_holding_waits(const Plan& plan, ValidationReport& report);
// Raised-versus-awaited balance of every signal.
void check_signal_balance(const Plan& plan, ValidationReport& report);
// Happens-before over steps and tiles: races, reads before writes, writes to inputs, output coverage.
void check_ordering_and_coverage(const Plan& plan, ValidationReport& report);

}  // namespace weft::detail
