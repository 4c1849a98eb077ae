// Static checks that a plan is correct for every interleaving, before anything runs it.
//
// validate_plan() proves, for the plan as data:
//   structure   - buffers, regions, signals and streams exist and shapes agree; peers are touched
//                 only through symmetric buffers; collectives agree across ranks;
//   liveness    - an abstract run (signals are monotone counters, so one run decides) finishes:
//                 no wait that can never be met, no cycle through signals or collectives;
//   signals     - every signal is raised exactly as often as its highest wait expects;
//   ordering    - every read of a region happens after the write that produced it (through stream
//                 order, signals or collectives), no two unordered accesses touch the same element
//                 with at least one write, nothing writes an input;
//   coverage    - every element of each rank's output is produced exactly once, before the rank ends.
// Messages name the rank, stream and step at fault. Usage:
//   auto report = validate_plan(plan); if (!report.ok()) std::cerr << report.summary();
#pragma once

#include <string>
#include <vector>

#include "weft/ir/plan.hpp"

namespace weft {

struct PlanError {
  std::string rule;  // structure, liveness, signals, ordering, coverage
  std::string message;
};

struct ValidationReport {
  std::vector<PlanError> errors;

  bool ok() const { return errors.empty(); }
  bool has(std::string_view rule) const;
  std::string summary() const;
};

ValidationReport validate_plan(const Plan& plan);

// Throws std::logic_error with the report's summary when the plan is invalid.
void require_valid(const Plan& plan);

}  // namespace weft
