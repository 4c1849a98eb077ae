// Fits the simulator's constants (machine_profile.hpp: gemm_efficiency ... barrier_seconds) to what
// weft bench recorded, so that its predictions match this machine: coordinate descent on the mean,
// over strategies, of each strategy's mean absolute relative error (every strategy weighs the same,
// however many rows it has). Plans are built once with the given profile; only the simulation is
// repeated.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "recorded_results.hpp"
#include "weft/ir/plan.hpp"
#include "weft/model/machine_profile.hpp"

namespace weft::bench {

struct SimulatedRow {
  RecordedRow recorded;
  Plan plan;
};

// The plans weft bench ran for the rows (its options: 128x256 base tile, the model's tiling).
// `each_row` (when given) is called once per row, for progress.
std::vector<SimulatedRow> plans_for(const std::vector<RecordedRow>& rows, const MachineProfile& machine,
                                    const std::function<void()>& each_row = {});

struct SimulatorError {
  std::map<std::string, std::pair<double, int>> per_strategy;  // mean |error|, rows
  double mean_over_strategies = 0;
  double mean_over_rows = 0;
};
SimulatorError simulator_error(const std::vector<SimulatedRow>& rows, const MachineProfile& machine);

// Each strategy's mean signed and absolute relative error over `rows` (leaving out rows of `skip`'s
// op, world and shape, and attention rows), for MachineProfile::prediction_accuracy: over the bf16
// rows, or with `fp8` over the FP8 rows (MachineProfile::fp8_prediction_accuracy).
std::map<std::string, MachineProfile::PredictionAccuracy> prediction_accuracy(const std::vector<SimulatedRow>& rows, const MachineProfile& machine,
                                                                                const Problem* skip = nullptr, bool fp8 = false);
// The same from each row's predicted seconds (`predicted[i]` for rows[i], simulated once under the
// profile judged: a leave-one-shape-out loop then costs no simulation per shape).
std::vector<double> predicted_seconds(const std::vector<SimulatedRow>& rows, const MachineProfile& machine);
std::map<std::string, MachineProfile::PredictionAccuracy> prediction_accuracy(const std::vector<SimulatedRow>& rows, const std::vector<double>& predicted,
                                                                                const Problem* skip = nullptr, bool fp8 = false);

// The profile with its simulator constants fitted; `log` gets a line per accepted change.
MachineProfile fit_simulator(const std::vector<SimulatedRow>& rows, MachineProfile start, std::string* log = nullptr);

}  // namespace weft::bench
