#include "simulator_fit.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "weft/model/simulator.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::bench {

std::vector<SimulatedRow> plans_for(const std::vector<RecordedRow>& rows, const MachineProfile& machine, const std::function<void()>& each_row) {
  PlanOptions o;
  o.tile_m = 128;
  o.tile_n = 256;
  o.machine = machine;
  std::vector<SimulatedRow> out;
  for (const RecordedRow& r : rows) {
    if (each_row) each_row();
    try {
      out.push_back({r, make_plan(find_strategy(r.strategy), r.problem, o)});
    } catch (const std::invalid_argument&) {
      // A strategy that no longer builds this shape (or no longer exists): not predictable.
    }
  }
  return out;
}

SimulatorError simulator_error(const std::vector<SimulatedRow>& rows, const MachineProfile& machine) {
  SimulatorError e;
  double total = 0;
  for (const SimulatedRow& r : rows) {
    const double error = std::abs(simulate(r.plan, machine).seconds * 1e3 / r.recorded.t_ms - 1);
    auto& s = e.per_strategy[r.recorded.strategy];
    s.first += error;
    ++s.second;
    total += error;
  }
  for (auto& [name, s] : e.per_strategy) {
    s.first /= s.second;
    e.mean_over_strategies += s.first;
  }
  if (!e.per_strategy.empty()) e.mean_over_strategies /= static_cast<double>(e.per_strategy.size());
  if (!rows.empty()) e.mean_over_rows = total / static_cast<double>(rows.size());
  return e;
}

std::vector<double> predicted_seconds(const std::vector<SimulatedRow>& rows, const MachineProfile& machine) {
  std::vector<double> out;
  out.reserve(rows.size());
  for (const SimulatedRow& r : rows) out.push_back(simulate(r.plan, machine).seconds);
  return out;
}

std::map<std::string, MachineProfile::PredictionAccuracy> prediction_accuracy(const std::vector<SimulatedRow>& rows, const std::vector<double>& predicted,
                                                                                const Problem* skip, bool fp8) {
  if (predicted.size() != rows.size())
    throw std::invalid_argument("prediction_accuracy: " + std::to_string(predicted.size()) + " predictions for " + std::to_string(rows.size()) + " rows");
  std::map<std::string, MachineProfile::PredictionAccuracy> out;
  std::map<std::string, int> count;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimulatedRow& r = rows[i];
    const Problem& q = r.recorded.problem;
    // Attention rows: auto does not predict attention with the simulator (its attention model is not
    // fitted), and their errors would move the biases of the GEMM ops' strategies of the same name
    // (sequential, decomposed, tilelink).
    if (is_attention(q.op)) continue;
    // One dtype's rows: FP8 GEMMs run at MachineProfile's FP8 rates, and their errors would move
    // the bf16 biases of the same strategies (and the other way round).
    if (is_fp8(q.input_dtype) != fp8) continue;
    if (skip && q.op == skip->op && q.world_size == skip->world_size && q.m == skip->m && q.n == skip->n && q.k == skip->k &&
        q.experts == skip->experts && q.topk == skip->topk)
      continue;
    const double error = predicted[i] * 1e3 / r.recorded.t_ms - 1;
    auto& a = out[r.recorded.strategy];
    a.bias += error;
    a.error += std::abs(error);
    ++count[r.recorded.strategy];
  }
  for (auto& [name, a] : out) {
    a.bias /= count[name];
    a.error /= count[name];
  }
  return out;
}

std::map<std::string, MachineProfile::PredictionAccuracy> prediction_accuracy(const std::vector<SimulatedRow>& rows, const MachineProfile& machine,
                                                                                const Problem* skip, bool fp8) {
  return prediction_accuracy(rows, predicted_seconds(rows, machine), skip, fp8);
}

MachineProfile fit_simulator(const std::vector<SimulatedRow>& rows, MachineProfile p, std::string* log) {
  struct Knob {
    const char* name;
    double MachineProfile::*field;
    double low, high;
  };
  const Knob knobs[] = {
      {"gemm_efficiency", &MachineProfile::gemm_efficiency, 0.6, 1.0},
      {"overlap_gemm_efficiency", &MachineProfile::overlap_gemm_efficiency, 0.6, 1.1},
      {"gemm_fixed_seconds", &MachineProfile::gemm_fixed_seconds, 0, 60e-6},
      {"launch_seconds", &MachineProfile::launch_seconds, 0, 30e-6},
      {"copy_latency_seconds", &MachineProfile::copy_latency_seconds, 0, 40e-6},
      {"link_bytes_per_s", &MachineProfile::link_bytes_per_s, 100e9, 500e9},
      {"nvlink_bytes_per_s", &MachineProfile::nvlink_bytes_per_s, 150e9, 900e9},
      {"gemm_slowdown_beside_copies", &MachineProfile::gemm_slowdown_beside_copies, 1.0, 1.5},
      {"barrier_seconds", &MachineProfile::barrier_seconds, 0, 60e-6},
  };
  double best = simulator_error(rows, p).mean_over_strategies;
  std::ostringstream out;
  out << "start: " << best * 100 << "%\n";
  for (double step : {0.3, 0.15, 0.07, 0.03})
    for (int round = 0; round < 3; ++round) {
      bool improved = false;
      for (const Knob& k : knobs)
        for (double factor : {1 - step, 1 + step}) {
          MachineProfile trial = p;
          double& value = trial.*(k.field);
          // Seconds may start at zero: a step moves them by a fraction of their range then.
          value = value > 0 ? value * factor : (factor > 1 ? step * k.high : 0);
          value = std::clamp(value, k.low, k.high);
          const double score = simulator_error(rows, trial).mean_over_strategies;
          if (score < best - 1e-6) {
            best = score;
            p = trial;
            improved = true;
            out << k.name << " -> " << p.*(k.field) << ": " << best * 100 << "%\n";
          }
        }
      if (!improved) break;
    }
  if (log) *log = out.str();
  return p;
}

}  // namespace weft::bench
