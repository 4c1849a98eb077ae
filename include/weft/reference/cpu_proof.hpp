// Proves one plan on the CPU: validate it, run it with the reference executor on fresh random inputs,
// and compare every rank's result with the op computed directly from its definition.
//   CpuProof proof = prove_on_cpu(plan, seed);
//   if (!proof.passed()) std::cerr << proof.explain();
// Used by the tests, by `weft check` and by `weft bench` on machines without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "weft/plan/validation.hpp"
#include "weft/reference/reference_executor.hpp"

namespace weft {

struct CpuProof {
  ValidationReport validation;
  bool executed = false;
  double worst_relative_error = 0.0;  // over ranks: ||got - want|| / ||the op on |inputs|||
  int worst_rank = -1;
  std::string failure;  // executor error, if any

  // Float arithmetic in a different summation order stays far below this.
  static constexpr double kTolerance = 1e-5;
  bool passed() const { return validation.ok() && executed && failure.empty() && worst_relative_error <= kTolerance; }
  std::string explain() const;
};

CpuProof prove_on_cpu(const Plan& plan, uint64_t seed, const ReferenceOptions& options = {});

}  // namespace weft
