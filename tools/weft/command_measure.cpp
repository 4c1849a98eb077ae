// Commands that measure the machine rather than a strategy: `weft characterize` (FiCCO's
// decomposition and contention losses) and `weft tune --calibrate` (the machine profile). Without a
// GPU each says so and exits kExitNoGpu (on_gpus.hpp).
#include <algorithm>
#include <filesystem>
#include <iterator>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "characterize.hpp"
#include "commands.hpp"
#include "common/text_file.hpp"
#include "progress.hpp"
#include "simulator_fit.hpp"
#include "tune_strategy.hpp"
#include "auto_check.hpp"
#include "weft/model/tuning_table.hpp"
#include "partition_study.hpp"
#include "bench_suite.hpp"
#include "on_gpus.hpp"
#include "weft/model/machine_profile.hpp"
#include "calibrate.hpp"

namespace weft::cli {

int command_characterize(const Arguments& args) {
  const BenchSuite suite = load_suite(suite_path(args.text("suite", "tilelink_mlp")));
  CharacterizeOptions o;
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  args.text("world", "");  // read below where there are GPUs; without them it has nothing to say
  return on_gpus("characterize", "measure", [&](const DeviceScan& scan) {
    o.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
    std::printf("suite '%s', AllGather+GEMM rows; %s\n\n", suite.name.c_str(), scan.devices.front().name.c_str());
    run_characterize(suite, o);
    return 0;
  }, o.csv_path);
}

namespace {

// Puts `note` ("; what ... details") into a profile's source in place of the note that starts as
// `prefix` did (a tool's earlier run), keeping the notes after it; appended where there is none.
void replace_note(std::string& source, const std::string& prefix, const std::string& note) {
  const size_t at = source.find(prefix);
  if (at == std::string::npos) {
    source += note;
    return;
  }
  const size_t next = source.find("; ", at + 2);
  source.replace(at, (next == std::string::npos ? source.size() : next) - at, note);
}

void print_error(const char* what, const bench::SimulatorError& e) {
  std::printf("%s: mean over strategies %.1f%%, over rows %.1f%%\n", what, e.mean_over_strategies * 100, e.mean_over_rows * 100);
  for (const auto& [name, s] : e.per_strategy) std::printf("  %-26s %6.1f%% over %d rows\n", name.c_str(), s.first * 100, s.second);
}

// weft tune --fit-simulator: the simulator's constants fitted to the rows weft bench recorded, with
// a cross-world check (fitted on one world size, judged on the other) beside the in-sample error.
int fit_simulator_command(const Arguments& args) {
  const std::string folder = args.text("results", std::string(WEFT_BENCH_DIR) + "/results");
  const std::string machine_path = args.text("machine", "");
  const MachineProfile start = machine_path.empty() ? MachineProfile{} : load_machine_profile(machine_path);
  const std::string out = args.text("out", "");
  // Opened before the fit (tens of seconds): an unwritable path fails now.
  std::optional<OutputFile> file;
  if (!out.empty()) file.emplace(out, "machine profile");
  auto recorded = bench::read_recorded_rows(folder);
  // The constants fitted are bf16's; FP8 rows (their main loop's own rate) would pull them.
  const auto fp8_begin = std::stable_partition(recorded.begin(), recorded.end(), [](const bench::RecordedRow& r) { return !is_fp8(r.problem.input_dtype); });
  const std::vector<bench::RecordedRow> fp8_recorded(std::make_move_iterator(fp8_begin), std::make_move_iterator(recorded.end()));
  recorded.erase(fp8_begin, recorded.end());
  std::vector<bench::SimulatedRow> rows;
  {
    Progress progress("weft tune --fit-simulator", "plans", recorded.size());
    rows = bench::plans_for(recorded, start, [&] { progress.step(); });
  }
  if (rows.empty()) throw std::invalid_argument("nothing to fit: " + folder + " holds no weft bench row at world >= 2 that a strategy plans");
  std::vector<bench::SimulatedRow> world2, other;
  for (const auto& r : rows) (r.recorded.problem.world_size == 2 ? world2 : other).push_back(r);
  print_error("before the fit, every row", bench::simulator_error(rows, start));
  std::string log;
  const MachineProfile fitted = bench::fit_simulator(rows, start, &log);
  std::printf("\nfit:\n%s\n", log.c_str());
  print_error("after the fit, every row (in sample)", bench::simulator_error(rows, fitted));
  if (!world2.empty() && !other.empty()) {
    print_error("fitted on world 2 alone, judged on world >= 3", bench::simulator_error(other, bench::fit_simulator(world2, start)));
    print_error("fitted on world >= 3 alone, judged on world 2", bench::simulator_error(world2, bench::fit_simulator(other, start)));
  }
  if (!out.empty()) {
    MachineProfile saved = fitted;
    saved.prediction_accuracy = bench::prediction_accuracy(rows, fitted);
    saved.fp8_prediction_accuracy = bench::prediction_accuracy(bench::plans_for(fp8_recorded, fitted), fitted, nullptr, /*fp8=*/true);
    const std::string note = "; simulator constants fitted by weft tune --fit-simulator";
    replace_note(saved.source, note, note + " on " + std::to_string(rows.size()) + " rows of " + folder + " (in sample " +
                    std::to_string(static_cast<int>(bench::simulator_error(rows, fitted).mean_over_strategies * 1000 + 0.5) / 10.0).substr(0, 4) +
                    "% mean per-strategy error)");
    file->write(machine_profile_json(saved));
    file->close();
    std::printf("\nfitted profile -> %s\n", out.c_str());
  }
  return 0;
}

// weft tune --fp8-accuracy: the profile (--machine) with its FP8 prediction accuracy recomputed from
// the FP8 rows under --results, everything else as it was (its bf16 accuracy and constants may come
// from fits over other rows).
int fp8_accuracy_command(const Arguments& args) {
  const std::string folder = args.text("results", std::string(WEFT_BENCH_DIR) + "/results");
  const std::string machine_path = args.text("machine", "");
  if (machine_path.empty()) throw std::invalid_argument("--fp8-accuracy needs --machine FILE (the profile it recomputes)");
  MachineProfile machine = load_machine_profile(machine_path);
  const std::string out = args.text("out", machine_path);
  std::vector<bench::RecordedRow> rows = bench::read_recorded_rows(folder);
  std::erase_if(rows, [](const bench::RecordedRow& r) { return !is_fp8(r.problem.input_dtype); });
  if (rows.empty()) throw std::invalid_argument("nothing to measure by: " + folder + " holds no FP8 weft bench row at world >= 2 (weft bench --dtype e4m3)");
  machine.fp8_prediction_accuracy = bench::prediction_accuracy(bench::plans_for(rows, machine), machine, nullptr, /*fp8=*/true);
  std::printf("FP8 prediction accuracy over %zu rows of %s (predicted / measured - 1):\n", rows.size(), folder.c_str());
  for (const auto& [name, a] : machine.fp8_prediction_accuracy)
    std::printf("  %-26s bias %+6.1f%%  error %5.1f%%\n", name.c_str(), a.bias * 100, a.error * 100);
  const std::string note = "; fp8_prediction_accuracy by weft tune --fp8-accuracy";
  replace_note(machine.source, note, note + " over " + std::to_string(rows.size()) + " FP8 rows of " + folder);
  OutputFile file(out, "machine profile");
  file.write(machine_profile_json(machine));
  file.close();
  std::printf("-> %s\n", out.c_str());
  return 0;
}

// weft tune --from-results: a tuning table of the rows weft bench recorded, merged into --out where
// it exists (its other entries, and the candidates the rows do not measure, such as weft tune
// --strategy's tuned knobs, are kept).
int table_from_results_command(const Arguments& args) {
  const std::string folder = args.text("results", std::string(WEFT_BENCH_DIR) + "/results");
  const std::string machine_path = args.text("machine", "");
  const MachineProfile machine = machine_path.empty() ? MachineProfile{} : load_machine_profile(machine_path);
  const std::string out = args.text("out", "tuning.json");
  const TuningTable measured = bench::tuning_table_from(bench::read_recorded_rows(folder), machine.device);
  if (measured.entries.empty()) throw std::invalid_argument("no tuning table written: " + folder + " holds no weft bench row at world >= 2");
  TuningTable table = std::filesystem::exists(out) ? load_tuning_table(out) : TuningTable{};
  if (table.machine.empty()) table.machine = measured.machine;
  for (const TuningEntry& e : measured.entries) merge_entry(table, e);
  OutputFile file(out, "tuning table");  // opened once the old table is read
  file.write(tuning_table_json(table));
  file.close();
  std::printf("%zu measured shapes -> %s (%zu entries with what it held; use with auto: PlanOptions::tuning or WEFT_TUNING_TABLE)\n",
              measured.entries.size(), out.c_str(), table.entries.size());
  return 0;
}

// weft tune --check-auto: what auto would have picked on the recorded rows, leaving each shape out
// of the table it chooses by, judged by the measurements.
int check_auto_command(const Arguments& args) {
  const std::string folder = args.text("results", std::string(WEFT_BENCH_DIR) + "/results");
  const std::string machine_path = args.text("machine", "");
  const MachineProfile machine = machine_path.empty() ? MachineProfile{} : load_machine_profile(machine_path);
  const auto rows = bench::read_recorded_rows(folder);
  int failures = 0;
  for (bool use_table : {true, false}) {
    const bench::AutoJudgement j = bench::judge_auto(rows, machine, use_table);
    std::printf("\nauto with %s, leave one shape out (%zu shapes at world >= 2):\n", use_table ? "the tuning table of the other shapes, else the simulator"
                                                                                          : "the simulator alone",
                j.rows.size());
    std::printf("%-22s %-9s %5s %-24s %8s %8s %-24s %8s %7s  %s\n", "row", "op", "world", "picked", "ms", "seq ms", "best", "ms", "vs best", "why");
    int strictly = 0;
    for (const bench::AutoJudged& r : j.rows) {
      strictly += r.picked_ms <= r.sequential_ms;
      // FP8 rows say so: a shape is measured in each dtype and scaling mode apart.
      const std::string row = is_fp8(r.problem.input_dtype)
                                  ? r.row + " (" + std::string(to_string(r.problem.input_dtype)) + " " + std::string(to_string(r.problem.scaling)) + ")"
                                  : r.row;
      std::printf("%-22s %-9s %5d %-24s %8.3f %8.3f %-24s %8.3f %+6.1f%%  %s\n", row.c_str(), std::string(to_string(r.problem.op)).c_str(),
                  r.problem.world_size, r.picked.c_str(), r.picked_ms, r.sequential_ms, r.best.c_str(), r.best_ms, (r.picked_ms / r.best_ms - 1) * 100,
                  r.reason.c_str());
    }
    const size_t n = j.rows.size();
    std::printf("not slower than sequential: %d of %zu (strictly: %d; within 0.5%% timing noise: %d); within 5%% of the best recorded: %d of %zu (%.0f%%)\n",
                j.never_slower, n, strictly, j.never_slower, j.near_best, n, n ? 100.0 * j.near_best / static_cast<double>(n) : 0.0);
    if (use_table) failures = static_cast<int>(n) - j.never_slower;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int command_tune(const Arguments& args) {
  // Exactly one mode: a second one would be silently ignored.
  const int modes = args.flag("calibrate") + args.flag("partitions") + args.flag("from-results") + args.flag("check-auto") +
                    args.flag("fit-simulator") + args.flag("fp8-accuracy") + !args.text("strategy", "").empty();
  if (modes != 1)
    throw std::invalid_argument(std::string(modes == 0 ? "give" : "give only") +
                                " one of --calibrate, --partitions, --strategy S, --from-results, --check-auto, --fit-simulator or --fp8-accuracy (weft tune --help)");
  if (args.flag("fit-simulator")) return fit_simulator_command(args);
  if (args.flag("fp8-accuracy")) return fp8_accuracy_command(args);
  if (args.flag("from-results")) return table_from_results_command(args);
  if (args.flag("check-auto")) return check_auto_command(args);
  const std::string strategy = args.text("strategy", "");
  if (!strategy.empty()) {
    StrategyTuningOptions o;
    o.strategy = find_strategy(strategy).name;
    o.ops = ops_from(args);
    o.keep = static_cast<int>(args.integer("keep", 3));
    o.warmup = static_cast<int>(args.integer("warmup", 5));
    o.iterations = static_cast<int>(args.integer("iterations", 20));
    o.seed = static_cast<uint64_t>(args.integer("seed", 1));
    const std::string machine = args.text("machine", "");
    if (!machine.empty()) o.machine = load_machine_profile(machine);
    const BenchSuite suite = load_suite(suite_path(args.text("suite", "default")));
    args.text("world", "");  // read below where there are GPUs
    if (const std::string out = args.text("out", ""); !out.empty()) require_writable(out, "tuning table");
    return on_gpus("tune --strategy", "measure", [&](const DeviceScan& scan) {
      o.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
      o.out = args.text("out", std::string(WEFT_BENCH_DIR) + "/tuning/" + (scan.devices.front().name.find("H100") != std::string::npos ? "h100" : "h200") + ".json");
      const int failed = run_strategy_tuning(suite, o);
      if (failed) std::printf("%d candidate(s) did not match sequential (left out of the table)\n", failed);
      return failed ? 1 : 0;
    });
  }
  const bool calibrate = args.flag("calibrate"), partitions = args.flag("partitions");
  const int warmup = static_cast<int>(args.integer("warmup", partitions ? 3 : 5));
  const int iterations = static_cast<int>(args.integer("iterations", 20));
  const std::string out = calibrate ? args.text("out", "machine_profile.json") : "";
  if (!out.empty()) require_writable(out, "machine profile");
  PartitionStudyOptions study;
  BenchSuite suite;
  if (partitions) {
    suite = load_suite(suite_path(args.text("suite", "flashoverlap_ar")));
    study.ops = ops_from(args);
    study.warmup = warmup;
    study.iterations = iterations;
    study.max_partitions = static_cast<int>(args.integer("max-partitions", 12));
    study.seed = static_cast<uint64_t>(args.integer("seed", 1));
    study.csv_path = args.text("csv", "");
    if (!study.csv_path.empty()) require_writable(study.csv_path, "CSV file");
    study.gemm_sms = static_cast<int>(args.integer("gemm-sms", 0));
    const std::string restore = args.text("restore", "");
    if (!restore.empty()) study.signal_restore = parse_signal_restore(restore);
    const std::string machine = args.text("machine", "");
    if (!machine.empty()) study.machine = load_machine_profile(machine);
  }
  args.text("world", "");  // read below where there are GPUs
  return on_gpus("tune", "measure", [&](const DeviceScan& scan) {
    if (partitions) {
      study.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
      std::printf("suite '%s'; machine profile: %s (%s)\n\n", suite.name.c_str(), study.machine.device.c_str(), study.machine.source.c_str());
      const int failed = run_partition_study(suite, study);
      if (failed) std::printf("\n%d partition(s) did not match sequential\n", failed);
      return failed ? 1 : 0;
    }
    const MachineProfile p = calibrate_machine(warmup, iterations);
    OutputFile file(out, "machine profile");
    file.write(machine_profile_json(p));
    file.close();
    std::printf("peak %.0f TFLOP/s, memory %.2f TB/s, %zu collective curves -> %s (use with --machine %s)\n", p.peak_flops * 1e-12,
                p.memory_bytes_per_s * 1e-12, p.collectives.size(), out.c_str(), out.c_str());
    return 0;
  }, study.csv_path);
}

}  // namespace weft::cli
