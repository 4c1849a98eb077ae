// `auto` (plan/auto.hpp).
#include "weft/plan/auto.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>

#include "weft/model/ficco_heuristic.hpp"
#include "weft/model/shipped_defaults.hpp"
#include "weft/model/simulator.hpp"

namespace weft {

const std::vector<std::string>& auto_candidates() {
  static const std::vector<std::string> names = {"sequential", "decomposed", "signal", "fused", "chunked", "ficco"};
  return names;
}

const std::vector<std::string>& auto_candidates(OpKind op) {
  static const std::vector<std::string> attention = {"sequential", "decomposed", "tilelink"};
  static const std::vector<std::string> moe = {"sequential", "decomposed", "tilelink"};
  if (op == OpKind::ag_moe || op == OpKind::moe_rs) return moe;
  return is_attention(op) ? attention : auto_candidates();
}

AutoChoice choose_strategy(const Problem& p, const PlanOptions& o) { return choose_strategy(p, o, auto_candidates(p.op)); }

void use_default_auto_inputs(PlanOptions& o) {
  if (o.machine == MachineProfile{}) o.machine = default_machine_profile();
  if (!o.tuning && o.machine == default_machine_profile()) o.tuning = default_tuning_table();
}

namespace {

// A predicted gain counts beyond this many times the strategy's recorded mean absolute error: a
// mean is exceeded by about half the predictions, and auto must not be slower than sequential.
constexpr double kErrorsTrusted = 2.0;

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", ms);
  return text;
}

}  // namespace

AutoChoice choose_strategy(const Problem& p, const PlanOptions& o, const std::vector<std::string>& candidates) {
  AutoChoice choice;
  choice.options = o;
  choice.candidate.strategy = "sequential";
  if (p.world_size == 1) {
    choice.reason = "a world of one: nothing to hide";
    return choice;
  }
  if (p.routing_on_device) {
    choice.reason = "MoE choices given on the device: only sequential plans them so far";
    return choice;
  }
  // The nearest measured shape, if near enough to stand for this one.
  const TuningEntry* measured = nullptr;
  if (o.tuning) {
    double distance = 0;
    measured = o.tuning->nearest(p, &distance);
    if (measured && (distance > o.auto_table_distance || measured->sequential_ms() <= 0)) measured = nullptr;
  }
  // Attention without a measured entry: the simulator's attention model is not fitted to the GPU
  // (it ranks decomposed ahead of tilelink where every recorded attention row at worlds 2 and 4 says
  // the reverse, tilelink the fastest of the three and ahead of sequential on each; bench/results
  // README), and recorded attention rows do not reach the tuning table yet (they do not record heads
  // and head dimension). Until one of them does, auto takes tilelink wherever it plans and runs here.
  if (is_attention(p.op) && !measured && std::find(candidates.begin(), candidates.end(), "tilelink") != candidates.end()) {
    try {
      make_plan(find_strategy("tilelink"), p, o);
      choice.candidate.strategy = "tilelink";
      choice.reason = "attention: tilelink measured faster than sequential on every recorded shape (the simulator's attention model is not fitted)";
      return choice;
    } catch (const std::invalid_argument&) {
      // tilelink declines this shape or cannot run here: the candidates are judged below.
    }
  }
  // Each candidate's time relative to sequential: measured at the nearest shape where it was
  // measured there (trusted beyond 1%, timing noise), else predicted by the simulator, corrected by
  // the strategy's recorded bias (trusted beyond its recorded error, and at least auto_margin).
  std::optional<double> predicted_sequential;
  const auto& accuracy = o.machine.accuracy_for(p.input_dtype);  // FP8 calls: the FP8 rows' where recorded
  std::string declines;  // why the strategies that do not run here decline ("; "-separated)
  auto prediction = [&](const std::string& name) -> std::optional<double> {
    try {
      const double seconds = simulate(make_plan(find_strategy(name), p, o), o.machine).seconds;
      const auto it = accuracy.find(name);
      return seconds / (1 + (it == accuracy.end() ? 0.0 : it->second.bias));
    } catch (const std::invalid_argument& e) {
      if (name != "sequential") declines += std::string(declines.empty() ? "" : "; ") + e.what();
      return std::nullopt;  // declines this shape
    }
  };
  // A strategy whose plan reaches a peer this topology cannot reach, or that the CUDA executor
  // cannot lower (PlanOptions::gpu_lowerable_only), does not run here at all.
  auto runs_here = [&](const std::string& name, const PlanOptions& with) {
    if (!o.topology && !o.gpu_lowerable_only) return true;
    try {
      make_plan(find_strategy(name), p, with);
      return true;
    } catch (const std::invalid_argument& e) {
      declines += std::string(declines.empty() ? "" : "; ") + e.what();
      return false;
    }
  };
  // Where sequential itself does not run (an FP8 problem whose gather the executor cannot lower),
  // the fastest strategy that does wins, whatever its margin over sequential's prediction.
  const bool sequential_runs = runs_here("sequential", o);
  double best_ratio = sequential_runs ? 1 : std::numeric_limits<double>::infinity();
  for (const std::string& name : candidates) {
    if (name == "sequential" || !find_strategy(name).supports(p.op)) continue;
    const TunedCandidate* at = nullptr;
    // weft bench records ficco under the schedule its heuristic picked (ficco_S, a strategy of its
    // own): that row is ficco's measurement here, where the heuristic picks the same schedule.
    const std::string recorded_as = name == "ficco" ? "ficco_" + std::string(to_string(pick_ficco_schedule(p, o.machine).schedule)) : name;
    if (measured)
      for (const TunedCandidate& c : measured->candidates)
        if ((c.strategy == name || c.strategy == recorded_as) && c.ms > 0 && (!at || c.ms < at->ms)) at = &c;
    double ratio = 0, trust = 0;
    std::string why;
    if (at) {
      ratio = at->ms / measured->sequential_ms();
      trust = 0.01;
      why = "measured at m=" + std::to_string(measured->m) + " n=" + std::to_string(measured->n) + " k=" + std::to_string(measured->k) + ": " + name +
            " " + format_ms(at->ms) + " vs sequential " + format_ms(measured->sequential_ms()) + " (" + measured->source + ")";
    } else {
      if (!predicted_sequential) predicted_sequential = prediction("sequential");
      const std::optional<double> mine = prediction(name);
      if (!mine || (!predicted_sequential && sequential_runs)) continue;
      ratio = predicted_sequential ? *mine / *predicted_sequential : *mine;
      const auto it = accuracy.find(name);
      trust = std::max(o.auto_margin, kErrorsTrusted * (it == accuracy.end() ? 0.0 : it->second.error));
      why = "predicted " + name + " " + format_ms(*mine * 1e3) +
            (predicted_sequential ? " vs sequential " + format_ms(*predicted_sequential * 1e3) : std::string(" (sequential does not run here)")) +
            " (bias-corrected; trusted beyond " + std::to_string(static_cast<int>(trust * 100 + 0.5)) + "%)";
    }
    if ((ratio <= 1 - trust || !sequential_runs) && ratio < best_ratio && runs_here(name, at ? apply_candidate(o, *at) : o)) {
      best_ratio = ratio;
      choice.candidate = at ? *at : TunedCandidate{name, {}, 0};
      choice.options = at ? apply_candidate(o, *at) : o;
      choice.reason = why;
    }
  }
  if (!sequential_runs && choice.candidate.strategy == "sequential")
    throw std::invalid_argument("auto: no strategy runs " + std::string(to_string(p.op)) + " " + std::string(to_string(p.input_dtype)) +
                                " here: " + declines);
  if (!sequential_runs) choice.reason = "sequential does not run here; " + choice.reason;
  else if (choice.candidate.strategy == "sequential")
    choice.reason = measured ? "measured at m=" + std::to_string(measured->m) + " n=" + std::to_string(measured->n) + " k=" + std::to_string(measured->k) +
                                   " and predicted: nothing trusted to be faster than sequential"
                             : "predicted: nothing trusted to be faster than sequential";
  return choice;
}

Plan plan_auto(const Problem& p, const PlanOptions& o) {
  const AutoChoice c = choose_strategy(p, o);
  Plan plan = make_plan(find_strategy(c.candidate.strategy), p, c.options);
  plan.strategy = "auto=" + plan.strategy;
  return plan;
}

}  // namespace weft
