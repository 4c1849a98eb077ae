#include "weft/plan/validation.hpp"

#include <sstream>
#include <stdexcept>

#include "checks.hpp"

namespace weft {

bool ValidationReport::has(std::string_view rule) const {
  for (const auto& e : errors)
    if (e.rule == rule) return true;
  return false;
}

std::string ValidationReport::summary() const {
  if (errors.empty()) return "plan is valid";
  std::ostringstream out;
  out << errors.size() << " problem(s) in plan:\n";
  for (const auto& e : errors) out << "  [" << e.rule << "] " << e.message << "\n";
  return out.str();
}

ValidationReport validate_plan(const Plan& plan) {
  ValidationReport report;
  detail::check_structure(plan, report);
  if (!report.ok()) return report;  // the other analyses index buffers and signals blindly
  detail::check_liveness(plan, report);
  detail::check_signal_balance(plan, report);
  detail::check_sm_holding_waits(plan, report);
  if (report.has("liveness")) return report;  // happens-before needs a plan that can finish
  detail::check_ordering_and_coverage(plan, report);
  return report;
}

void require_valid(const Plan& plan) {
  auto report = validate_plan(plan);
  if (!report.ok()) throw std::logic_error("plan '" + plan.strategy + "' for " + describe(plan.problem) + ": " + report.summary());
}

}  // namespace weft
