// `weft simulate`: the simulator's prediction for a problem (every strategy, or those named), a
// Chrome/Perfetto trace of one, and its check against every row weft bench recorded.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "commands.hpp"
#include "common/text_file.hpp"
#include "progress.hpp"
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
  // The CSV is opened before the work: an unwritable path fails now, not after the table.
  std::optional<OutputFile> csv;
  if (!csv_path.empty()) csv.emplace(csv_path, "CSV file");
  const auto rows = bench::read_recorded_rows(folder);
  if (csv) std::fprintf(csv->stream(), "file,row,op,world,m,n,k,strategy,measured_ms,predicted_ms,error,gemm_measured_ms,gemm_predicted_ms\n");
  std::map<std::string, std::pair<double, int>> by_strategy;  // sum of |error|, count
  std::map<int, std::pair<double, int>> by_world;
  double gemm_error = 0;
  int gemm_rows = 0, unpredicted = 0;
  Progress progress("weft simulate", "recorded rows", rows.size());
  std::printf("%-22s %-9s %5s %-26s %10s %10s %8s\n", "row", "op", "world", "strategy", "measured", "predicted", "error");
  for (const bench::RecordedRow& r : rows) {
    progress.step();
    double predicted = 0, gemm_predicted = 0;
    try {
      const Strategy& strategy = find_strategy(r.strategy);
      // The bound `simulate` holds one problem to: a recorded row is no exception.
      require_plan_fits(r.problem, resolve_options(strategy, r.problem, bench_options(machine)));
      const Plan plan = make_plan(strategy, r.problem, bench_options(machine));
      predicted = simulate(plan, machine).seconds * 1e3;
      if (r.strategy == "sequential") {
        gemm_predicted = simulate(steps_of_kind(plan, StepKind::gemm), machine).seconds * 1e3;
        gemm_error += std::abs(gemm_predicted / r.t_gemm_ms - 1);
        ++gemm_rows;
      }
    } catch (const std::invalid_argument& e) {
      ++unpredicted;
      std::printf("%-22s %-9s %5d %-26s %10.3f %10s  (not predicted: %s)\n", r.row.c_str(), std::string(to_string(r.problem.op)).c_str(),
                  r.problem.world_size, r.strategy.c_str(), r.t_ms, "-", e.what());
      continue;
    }
    const double error = predicted / r.t_ms - 1;
    // FP8 rows apart: their GEMMs are costed at MachineProfile's FP8 rates, not fitted with bf16's.
    const std::string label = is_fp8(r.problem.input_dtype) ? r.strategy + " (" + std::string(to_string(r.problem.input_dtype)) + ")" : r.strategy;
    auto& s = by_strategy[label];
    s.first += std::abs(error);
    ++s.second;
    auto& w = by_world[r.problem.world_size];
    w.first += std::abs(error);
    ++w.second;
    std::printf("%-22s %-9s %5d %-26s %10.3f %10.3f %+7.1f%%\n", r.row.c_str(), std::string(to_string(r.problem.op)).c_str(),
                r.problem.world_size, label.c_str(), r.t_ms, predicted, error * 100);
    if (csv)
      std::fprintf(csv->stream(), "%s,\"%s\",%s,%d,%lld,%lld,%lld,%s,%.6f,%.6f,%.4f,%.6f,%.6f\n", r.file.c_str(), r.row.c_str(),
                   std::string(to_string(r.problem.op)).c_str(), r.problem.world_size, static_cast<long long>(r.problem.m),
                   static_cast<long long>(r.problem.n), static_cast<long long>(r.problem.k), label.c_str(), r.t_ms, predicted, error,
                   r.t_gemm_ms, gemm_predicted);
  }
  progress.finish();
  if (csv) csv->close();
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
  if (unpredicted) std::printf("  %d row(s) not predicted (the reasons are in the table)\n", unpredicted);
  if (csv) std::printf("rows -> %s\n", csv_path.c_str());
  if (count == 0) {
    std::fprintf(stderr, "weft simulate: nothing was predicted: %s holds no weft bench row at world >= 2 that a strategy plans\n", folder.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int command_simulate(const Arguments& args) {
  const PlanOptions base = plan_options_from(args);
  const std::string results = args.text("check-results", "");
  const std::string csv = args.text("csv", "");
  const std::string trace = args.text("trace", "");
  if (!results.empty()) {
    if (!trace.empty()) throw std::invalid_argument("--trace is a trace of one problem's plan; --check-results replays recorded rows and writes none");
    return check_against_results(results, base.machine, csv);
  }
  if (!csv.empty()) throw std::invalid_argument("--csv writes the rows of --check-results; for one problem the table is the output");
  const Problem problem = problem_from(args);
  require_plan_fits(problem, base);
  std::vector<std::string> names = args.list("strategy", {});
  if (names.empty() && base.chunked.schedule) names = {"chunked"};  // a schedule is chunked's, as in weft plan
  if (names.empty())
    for (const Strategy& s : strategies())
      if (s.supports(problem.op)) names.push_back(s.name);
  for (const std::string& name : names) require_supports(find_strategy(name), problem.op);
  require_knobs_apply(args, names);
  // The trace file is opened before the work: an unwritable path fails now.
  std::optional<OutputFile> trace_file;
  if (!trace.empty()) trace_file.emplace(trace, "trace");
  std::printf("%s on %s (%s)\n", describe(problem).c_str(), base.machine.device.c_str(), base.machine.source.c_str());
  const double sequential = simulate(make_plan(find_strategy("sequential"), problem, base), base.machine).seconds;
  std::printf("%-26s %12s %9s\n", "strategy", "predicted ms", "speedup");
  int predicted = 0;
  for (const std::string& name : names) {
    const Strategy& s = find_strategy(name);
    Plan plan;
    try {
      plan = make_plan(s, problem, base);
    } catch (const std::invalid_argument& e) {
      std::printf("%-26s %12s %9s  (%s)\n", name.c_str(), "-", "-", e.what());
      if (trace_file && name == names.front())
        throw std::invalid_argument("--trace: " + name + " (the first strategy named) has no plan for this problem: " + e.what());
      continue;
    }
    const Simulation sim = simulate(plan, base.machine);
    ++predicted;
    std::printf("%-26s %12.3f %9.3f%s\n", plan.strategy.c_str(), sim.seconds * 1e3, sequential / sim.seconds,
                sim.stuck.empty() ? "" : ("  STUCK: " + sim.stuck).c_str());
    if (trace_file && name == names.front()) {
      trace_file->write(chrome_trace(plan, sim));
      trace_file->close();
      std::printf("trace of %s written to %s (open in https://ui.perfetto.dev or chrome://tracing)\n", plan.strategy.c_str(), trace.c_str());
    }
  }
  if (predicted == 0) {
    std::fprintf(stderr, "weft simulate: no strategy chosen has a plan for this problem (the reasons are in the table)\n");
    return 1;
  }
  return 0;
}

}  // namespace weft::cli
