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

namespace {

// Where a plan says it keeps the gathered A (RankPlan::gathered_a), every rank's A shard in rank
// order, exactly (copies, no arithmetic); "" when it does, or keeps none.
std::string gathered_a_mismatch(const Plan& plan, const std::vector<RankTensors>& inputs, const std::vector<RankTensors>& memory) {
  const std::vector<HostMatrix> gathered = gathered_a_of(plan, memory);
  for (size_t r = 0; r < gathered.size(); ++r) {
    if (plan.ranks[r].gathered_a.empty()) continue;
    int64_t row = 0;
    for (const RankTensors& source : inputs) {
      const HostMatrix& a = source.at("A");
      for (int64_t i = 0; i < a.rows; ++i, ++row)
        for (int64_t c = 0; c < a.cols; ++c)
          if (row >= gathered[r].rows || c >= gathered[r].cols || !(gathered[r].at(row, c) == a.at(i, c)))
            return "rank " + std::to_string(r) + "'s gathered A differs from the ranks' A shards at row " + std::to_string(row) + ", column " +
                   std::to_string(c);
    }
  }
  return "";
}

}  // namespace

CpuProof prove_on_cpu(const Plan& plan, uint64_t seed, const ReferenceOptions& options) {
  CpuProof proof;
  proof.validation = validate_plan(plan);
  if (!proof.validation.ok()) return proof;
  const auto inputs = random_inputs(plan.problem, seed);
  try {
    const auto memory = run_reference(plan, inputs, options);
    const auto results = outputs_of(plan, memory);
    proof.executed = true;
    proof.failure = gathered_a_mismatch(plan, inputs, memory);
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
