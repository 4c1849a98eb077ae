#include "weft/reference/cpu_proof.hpp"

#include <cmath>
#include <sstream>

namespace weft {

std::string CpuProof::explain() const {
  std::ostringstream out;
  if (!validation.ok()) out << validation.summary();
  if (!failure.empty()) out << "reference run failed: " << failure << "\n";
  if (executed && failure.empty())
    out << "worst error relative to the terms' size " << worst_relative_error << " on rank " << worst_rank << " (tolerance " << kTolerance
        << ")\n";
  return out.str();
}

CpuProof prove_on_cpu(const Plan& plan, uint64_t seed, const ReferenceOptions& options) {
  CpuProof proof;
  proof.validation = validate_plan(plan);
  if (!proof.validation.ok()) return proof;
  const auto inputs = random_inputs(plan.problem, seed);
  try {
    const auto results = outputs_of(plan, run_reference(plan, inputs, options));
    proof.executed = true;
    const auto expected = expected_outputs(plan.problem, inputs);
    // Errors relative to the size of the terms (expected_magnitudes): relative to a near-cancelling
    // result itself a reordered float sum can differ by far more than a few roundings.
    const auto scale = expected_magnitudes(plan.problem, inputs);
    for (size_t r = 0; r < results.size(); ++r) {
      const double error = relative_error(results[r], expected[r], scale[r]);
      if (proof.worst_rank < 0 || error > proof.worst_relative_error) {
        proof.worst_relative_error = error;
        proof.worst_rank = static_cast<int>(r);
      }
    }
  } catch (const std::exception& e) {
    proof.failure = e.what();
  }
  return proof;
}

}  // namespace weft
