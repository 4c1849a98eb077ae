// `weft simulate`: the simulator's prediction for a problem (every strategy, or those named), a
// Chrome/Perfetto trace of one, and its check against every row weft bench recorded.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "commands.hpp"
#include "recorded_results.hpp"
#include "weft/model/simulator.hpp"
#include "weft/plan/transforms.hpp"

namespace weft::cli {

namespace {

// The options `weft bench` builds plans with (gpu_bench.cpp), for predicting what it measured.
PlanOptions bench_options(const MachineProfile& machine) {
  PlanOptions o;
  o.tile_m = 128;
  o.tile_n = 256;
  o.machine = machine;
  return o;
}

int check_against_results(const std::string& folder, const MachineProfile& machine, const std::string& csv_path) {
  const auto rows = bench::read_recorded_rows(folder);
  std::FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
  if (csv) std::fprintf(csv, "file,row,op,world,m,n,k,strategy,measured_ms,predicted_ms,error,gemm_measured_ms,gemm_predicted_ms\n");
  std::map<std::string, std::pair<double, int>> by_strategy;  // sum of |error|, count
  std::map<int, std::pair<double, int>> by_world;
  double gemm_error = 0;
  int gemm_rows = 0;
  std::printf("%-22s %-9s %5s %-26s %10s %10s %8s\n", "row", "op", "world", "strategy", "measured", "predicted", "error");
  for (const bench::RecordedRow& r : rows) {
    double predicted = 0, gemm_predicted = 0;
    try {
      const Plan plan = make_plan(find_strategy(r.strategy), r.problem, bench_options(machine));
      predicted = simulate(plan, machine).seconds * 1e3;
      if (r.strategy == "sequential") {
        gemm_predicted = simulate(steps_of_kind(plan, StepKind::gemm), machine).seconds * 1e3;
        gemm_error += std::abs(gemm_predicted / r.t_gemm_ms - 1);
        ++gemm_rows;
      }
    } catch (const std::exception& e) {
      std::printf("%-22s %-9s %5d %-26s %10.3f %10s  (%s)\n", r.row.c_str(), std::string(to_string(r.problem.op)).c_str(), r.problem.world_size,
                  r.strategy.c_str(), r.t_ms, "-", e.what());
      continue;
    }
    const double error = predicted / r.t_ms - 1;
    auto& s = by_strategy[r.strategy];
    s.first += std::abs(error);
    ++s.second;
    auto& w = by_world[r.problem.world_size];
    w.first += std::abs(error);
    ++w.second;
    std::printf("%-22s %-9s %5d %-26s %10.3f %10.3f %+7.1f%%\n", r.row.c_str(), std::string(to_string(r.problem.op)).c_str(),
                r.problem.world_size, r.strategy.c_str(), r.t_ms, predicted, error * 100);
    if (csv)
      std::fprintf(csv, "%s,\"%s\",%s,%d,%lld,%lld,%lld,%s,%.6f,%.6f,%.4f,%.6f,%.6f\n", r.file.c_str(), r.row.c_str(),
                   std::string(to_string(r.problem.op)).c_str(), r.problem.world_size, static_cast<long long>(r.problem.m),
                   static_cast<long long>(r.problem.n), static_cast<long long>(r.problem.k), r.strategy.c_str(), r.t_ms, predicted, error,
                   r.t_gemm_ms, gemm_predicted);
  }
  if (csv) std::fclose(csv);
  std::printf("\nmean absolute error of the predicted call time, per strategy (%zu recorded rows, world >= 2):\n", rows.size());
  double total = 0;
  int count = 0;
  for (const auto& [name, s] : by_strategy) {
    std::printf("  %-26s %6.1f%% over %d rows\n", name.c_str(), 100 * s.first / s.second, s.second);
    total += s.first;
    count += s.second;
  }
  for (const auto& [world, s] : by_world) std::printf("  world %d: %6.1f%% over %d rows\n", world, 100 * s.first / s.second, s.second);
  if (count) std::printf("  all: %.1f%% over %d rows\n", 100 * total / count, count);
  if (gemm_rows) std::printf("  the GEMM alone (sequential's): %.1f%% over %d rows\n", 100 * gemm_error / gemm_rows, gemm_rows);
  return 0;
}

}  // namespace

int command_simulate(const Arguments& args) {
  const PlanOptions base = plan_options_from(args);
  const std::string results = args.text("check-results", "");
  if (!results.empty()) return check_against_results(results, base.machine, args.text("csv", ""));
  const Problem problem = problem_from(args);
  require_plan_fits(problem, base);
  std::vector<std::string> names = args.list("strategy", {});
  if (names.empty())
    for (const Strategy& s : strategies())
      if (s.supports(problem.op)) names.push_back(s.name);
  const std::string trace = args.text("trace", "");
  std::printf("%s on %s (%s)\n", describe(problem).c_str(), base.machine.device.c_str(), base.machine.source.c_str());
  const double sequential = simulate(make_plan(find_strategy("sequential"), problem, base), base.machine).seconds;
  std::printf("%-26s %12s %9s\n", "strategy", "predicted ms", "speedup");
  for (const std::string& name : names) {
    const Strategy& s = find_strategy(name);
    if (!s.supports(problem.op)) continue;
    Plan plan;
    try {
      plan = make_plan(s, problem, base);
    } catch (const std::invalid_argument& e) {
      std::printf("%-26s %12s %9s  (%s)\n", name.c_str(), "-", "-", e.what());
      continue;
    }
    const Simulation sim = simulate(plan, base.machine);
    std::printf("%-26s %12.3f %9.3f%s\n", plan.strategy.c_str(), sim.seconds * 1e3, sequential / sim.seconds,
                sim.stuck.empty() ? "" : ("  STUCK: " + sim.stuck).c_str());
    if (!trace.empty() && name == names.front()) {
      std::ofstream(trace) << chrome_trace(plan, sim);
      std::printf("trace of %s written to %s (open in https://ui.perfetto.dev or chrome://tracing)\n", plan.strategy.c_str(), trace.c_str());
    }
  }
  return 0;
}

}  // namespace weft::cli
