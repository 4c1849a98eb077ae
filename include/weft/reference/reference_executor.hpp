// Runs a plan on the CPU: one thread per (rank, stream), real float arithmetic, real blocking waits.
//
// It is the executable meaning of the plan IR. Every buffer that is not an input starts as NaN, so an
// element nobody wrote shows up in the result. A wait that is not met within the timeout stops the
// whole run with an error naming the rank, step, signal and values: a broken plan fails, it never
// hangs. Usage:
//   auto memory = run_reference(plan, random_inputs(problem, seed));
//   auto results = outputs_of(plan, memory);   // one matrix per rank
#pragma once

#include <chrono>
#include <stdexcept>
#include <vector>

#include "weft/reference/host_matrix.hpp"
#include "weft/ir/plan.hpp"

namespace weft {

struct ReferenceOptions {
  std::chrono::milliseconds timeout{10000};
  // A rank that stops (a killed process, or one that skips the call): it runs only its first
  // `steps_before_stop` steps in plan order and nothing after, so what peers wait for from it never
  // comes; they must time out with an error naming the op, their wait and this rank.
  int stopped_rank = -1;
  int steps_before_stop = 0;
};

// Thrown when a wait or a collective times out; what() names the op and strategy, the wait that
// gave up, and every wait still blocked then with the ranks that raise what it waits for.
class ReferenceTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every buffer of every rank by name, after the plan ran. `inputs` supplies each input buffer.
std::vector<RankTensors> run_reference(const Plan& plan, const std::vector<RankTensors>& inputs,
                                       const ReferenceOptions& options = {});

// Each rank's output region, cut out of the memory run_reference returned.
std::vector<HostMatrix> outputs_of(const Plan& plan, const std::vector<RankTensors>& memory);
// Each rank's gathered A (RankPlan::gathered_a: its pieces stacked), cut out of that memory; an
// empty matrix for a rank whose plan keeps none.
std::vector<HostMatrix> gathered_a_of(const Plan& plan, const std::vector<RankTensors>& memory);

}  // namespace weft
