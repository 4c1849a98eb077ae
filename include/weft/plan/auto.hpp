// `auto`: which strategy, with which knobs, a call of this problem runs.
//
//   AutoChoice c = choose_strategy(problem, options);   // what plan_auto builds
//
// A world of one runs sequential (nothing to hide). Otherwise each of `candidates` is weighed by its
// time relative to sequential: as measured at the tuning table's nearest shape of the same op and
// world size (within options.auto_table_distance), where it was measured there; else as the
// simulator predicts it, corrected by the strategy's recorded bias on this machine
// (MachineProfile::prediction_accuracy). A measured gain counts beyond 1% (timing noise), a
// predicted one beyond twice the strategy's recorded error and at least options.auto_margin; the largest
// gain that counts wins, and sequential where none does. A pure function of its arguments, so every
// rank chooses the same.
#pragma once

#include <string>
#include <vector>

#include "weft/model/tuning_table.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

struct AutoChoice {
  TunedCandidate candidate;  // strategy and knobs (ms: measured or predicted, for the record)
  PlanOptions options;       // the options it builds with
  std::string reason;        // one line: measured where, or predicted what
};

// The strategies auto chooses among by default: sequential, decomposed, signal, fused, chunked and
// ficco (FiCCO's heuristic picks its schedule); for ag_attention, sequential, decomposed and
// tilelink; for ag_moe and moe_rs, sequential and tilelink (the tuning table has no attention or MoE
// rows yet: the simulator chooses there).
const std::vector<std::string>& auto_candidates();
const std::vector<std::string>& auto_candidates(OpKind op);

AutoChoice choose_strategy(const Problem& problem, const PlanOptions& options, const std::vector<std::string>& candidates);
// Among auto_candidates(problem.op).
AutoChoice choose_strategy(const Problem& problem, const PlanOptions& options);

// What auto chooses by where the caller left it as it is (weft::Op, the Python module): the default
// machine profile where `options.machine` is MachineProfile{}, and the default tuning table beside it
// where `options.tuning` is unset (model/shipped_defaults.hpp; a caller's own profile gets no other
// machine's table).
void use_default_auto_inputs(PlanOptions& options);

}  // namespace weft
