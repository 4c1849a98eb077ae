#include "common/text_file.hpp"
#include "partition_study.hpp"

#include <sstream>
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <set>

#include "measure.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/plan/transforms.hpp"
#include "weft/plan/validation.hpp"
#include "weft/model/wave_partition.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft::cli {

using namespace weft::bench;

namespace {

constexpr double kTolerance = 2e-2;

// Groups of `size` waves, the first cut to 2 and the last to 4 waves (the candidate set's bounds).
std::vector<int> uniform_partition(int waves, int size) {
  std::vector<int> parts;
  int left = waves;
  const int first = std::min({size, 2, left});
  parts.push_back(first);
  left -= first;
  while (left > 0) {
    const int s = std::min(size, left);
    parts.push_back(s);
    left -= s;
  }
  while (parts.back() > 4) {
    const int last = parts.back();
    parts.back() = last - 4;
    parts.push_back(4);
  }
  return parts;
}

std::vector<std::vector<int>> partitions_to_time(int waves, const std::vector<int>& searched, int most, uint64_t seed) {
  std::vector<std::vector<int>> all;
  try {
    all = wave_partition_candidates(waves, 2, 4, static_cast<size_t>(most));
    return all;  // every candidate fits
  } catch (const std::length_error&) {
  }
  std::set<std::vector<int>> chosen{searched};
  for (int size : {1, 2, 3, 4, 6, 8, 12, 16})
    if (size <= waves && chosen.size() < static_cast<size_t>(most)) chosen.insert(uniform_partition(waves, size));
  std::mt19937_64 rng(seed);
  for (int tries = 0; chosen.size() < static_cast<size_t>(most) && tries < 1000; ++tries) {
    std::vector<int> parts{1 + static_cast<int>(rng() % 2)};
    int left = waves - parts[0];
    while (left > 4) {
      const int s = 1 + static_cast<int>(rng() % std::min(left - 1, 8));
      parts.push_back(s);
      left -= s;
    }
    if (left > 0) parts.push_back(left);
    chosen.insert(parts);
  }
  return {chosen.begin(), chosen.end()};
}

struct Timed {
  std::string row;
  int world = 0;
  std::vector<int> partition;
  double predicted_ms = 0, measured_ms = 0;
  bool searched = false;
  // What the prediction was made from, so that the fit can predict again with other constants.
  Problem problem;
  PlanOptions options;
  double gemm_seconds = 0;
  CollectiveKind collective = CollectiveKind::all_reduce;  // signal's call for this op
};

// The profile's per-collective cost beside the GEMM and the slowdown of the measured collectives'
// curves that predict the measured times best (mean absolute error ratio), by a grid search.
struct Fit {
  double call_seconds = 0, slowdown = 1, error = 0;
};
Fit fit_overlap_constants(const std::vector<Timed>& all, const MachineProfile& machine) {
  auto with = [&](double call_seconds, double slowdown) {
    MachineProfile m = machine;
    m.overlapped_call_seconds = call_seconds;
    for (CollectiveCurve& c : m.collectives)
      for (const Timed& t : all)
        if (c.kind == t.collective && c.world_size == t.world) c.overlapped_slowdown = slowdown;
    return m;
  };
  Fit best{0, 1, 1e300};
  for (double call_us : {0.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0})
    for (int step = 0; step <= 20; ++step) {
      const double slowdown = 1.0 + 0.05 * step;
      const MachineProfile m = with(call_us * 1e-6, slowdown);
      double error = 0;
      for (const Timed& t : all) {
        PlanOptions options = t.options;
        options.machine = m;
        error += std::abs(signal_layout(t.problem, options, t.gemm_seconds).predicted_seconds * 1e3 - t.measured_ms) / t.measured_ms;
      }
      error /= static_cast<double>(all.size());
      if (error < best.error) best = Fit{call_us * 1e-6, slowdown, error};
    }
  return best;
}

}  // namespace

int run_partition_study(const BenchSuite& suite, const PartitionStudyOptions& o) {
  PlanOptions base;
  base.machine = o.machine;
  base.gemm_sms = o.gemm_sms;
  base.signal_restore = o.signal_restore;
  std::vector<Timed> all;
  int failures = 0;
  double searched_over_best_sum = 0;
  int rows_compared = 0;
  std::printf("%-22s %5s %6s %-28s %10s %10s %8s\n", "row", "world", "waves", "partition", "predicted", "measured", "error");
  for (int world : o.world_sizes) {
    auto group = first_gpus(world);
    for (const SuiteRow& row : suite.rows) {
      if (std::find(o.ops.begin(), o.ops.end(), row.op) == o.ops.end()) continue;
      if (!find_strategy("signal").supports(row.op)) continue;
      Problem problem;
      PlanOptions options;
      Plan automatic;
      try {
        problem = problem_for(row, world, o.seed);
        options = resolve_options(find_strategy("signal"), problem, base);
        automatic = plan_signal(problem, options);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "weft tune: skipping '%s' at world %d: %s\n", row.name.c_str(), world, e.what());
        continue;
      }
      // The offline stage: the signal GEMM alone (its tile table, on its SMs, no communication).
      const Plan gemm_alone = steps_of_kind(automatic, StepKind::gemm);
      const Plan sequential = plan_sequential(problem, base);
      const double gemm_seconds = slowest_rank_median_ms(group, gemm_alone, o.seed, o.warmup, o.iterations, "signal GEMM") * 1e-3;
      PlanOptions searching = options;
      searching.wave_partition.clear();
      const SignalLayout searched = signal_layout(problem, searching, gemm_seconds);
      const auto partitions = partitions_to_time(searched.waves, searched.partition, o.max_partitions, o.seed);
      std::fprintf(stderr, "weft tune: world %d, %s: %d waves, GEMM alone %.3f ms, %zu partitions\n", world, row.name.c_str(),
                   searched.waves, gemm_seconds * 1e3, partitions.size());

      std::vector<Plan> plans{sequential};
      std::vector<double> predicted;
      for (const auto& partition : partitions) {
        PlanOptions fixed = options;
        fixed.wave_partition = partition;
        plans.push_back(plan_signal(problem, fixed));
        require_valid(plans.back());
        predicted.push_back(signal_layout(problem, fixed, gemm_seconds).predicted_seconds * 1e3);
      }
      const size_t count = plans.size();
      std::vector<std::vector<double>> medians(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::vector<std::vector<double>> errors(count, std::vector<double>(static_cast<size_t>(world), 0.0));
      std::barrier sync(world);
      for_each_rank(group, [&](Communicator& comm) {
        const int rank = comm.rank();
        cudaStream_t stream;
        WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        double* sums = nullptr;
        WEFT_CUDA_CHECK(cudaMalloc(&sums, 3 * sizeof(double)));
        CudaExecutor reference(comm, plans[0], ExecutorOptions{.validate = false});
        fill_buffers(reference, rank, o.seed, stream);
        reference.run(stream);
        finish_or_explain(reference, stream, "sequential");
        const DeviceRegion want = reference.output();
        // One executor at a time: every candidate holds C-sized scratch.
        for (size_t p = 1; p < count; ++p) {
          CudaExecutor exec(comm, plans[p], ExecutorOptions{.validate = false});
          fill_buffers(exec, rank, o.seed, stream);
          errors[p][static_cast<size_t>(rank)] = run_against_device_result(exec, want, sums, stream, "signal " + to_string(partitions[p - 1]));
          medians[p][static_cast<size_t>(rank)] = median_call_ms(
              comm, [&] { sync.arrive_and_wait(); }, stream, o.warmup, o.iterations, [&](cudaStream_t s) { exec.run(s); },
              [&] { finish_or_explain(exec, stream, "signal"); });
        }
        cudaFree(sums);
        cudaStreamDestroy(stream);
      });
      double best = 1e300, searched_ms = 0;
      for (size_t p = 1; p < count; ++p) {
        Timed t;
        t.row = row.name;
        t.world = world;
        t.partition = partitions[p - 1];
        t.predicted_ms = predicted[p - 1];
        t.measured_ms = *std::max_element(medians[p].begin(), medians[p].end());
        t.searched = t.partition == searched.partition;
        t.problem = problem;
        t.options = options;
        t.options.wave_partition = t.partition;
        t.gemm_seconds = gemm_seconds;
        t.collective = searched.collective;
        const double error = *std::max_element(errors[p].begin(), errors[p].end());
        const bool ok = error <= kTolerance;
        failures += !ok;
        best = std::min(best, t.measured_ms);
        if (t.searched) searched_ms = t.measured_ms;
        std::printf("%-22s %5d %6d %-28s %10.3f %10.3f %7.1f%%%s%s\n", t.row.c_str(), world, searched.waves,
                    to_string(t.partition).substr(0, 28).c_str(), t.predicted_ms, t.measured_ms,
                    100.0 * std::abs(t.predicted_ms - t.measured_ms) / t.measured_ms, t.searched ? "  <- searched" : "",
                    ok ? "" : "  MISMATCH");
        std::fflush(stdout);
        all.push_back(t);
      }
      if (searched_ms > 0) {
        std::printf("%-22s %5d searched %s: %.3f ms, best measured %.3f ms (%.1f%%)\n", row.name.c_str(), world,
                    to_string(searched.partition).c_str(), searched_ms, best, 100.0 * best / searched_ms);
        searched_over_best_sum += best / searched_ms;
        ++rows_compared;
      }
    }
  }
  double error_sum = 0;
  for (const Timed& t : all) error_sum += std::abs(t.predicted_ms - t.measured_ms) / t.measured_ms;
  // Only curves the profile has can carry a slowdown; without one the fit is of the call cost alone.
  if (!all.empty()) {
    const Fit fit = fit_overlap_constants(all, o.machine);
    std::printf("fit: overlapped_call_seconds %.1f us and overlapped_slowdown %.2f on the curves of these collectives predict these "
                "measurements with a mean absolute error ratio of %.1f%% (in sample; the profile's: %.1f us)\n",
                fit.call_seconds * 1e6, fit.slowdown, 100.0 * fit.error, o.machine.overlapped_call_seconds * 1e6);
  }
  if (!all.empty())
    std::printf("\npredictor: mean absolute error ratio %.1f%% over %zu (shape, partition, world size) combinations\n",
                100.0 * error_sum / static_cast<double>(all.size()), all.size());
  if (rows_compared > 0)
    std::printf("searched partition: %.1f%% of the best measured partition's speed on average over %d rows\n",
                100.0 * searched_over_best_sum / rows_compared, rows_compared);
  if (!o.csv_path.empty()) {
    std::ostringstream csv;
    csv << "row,world,partition,predicted_ms,measured_ms,searched\n";
    for (const Timed& t : all)
      csv << '"' << t.row << "\"," << t.world << ",\"" << to_string(t.partition) << "\"," << t.predicted_ms << ',' << t.measured_ms
          << ',' << (t.searched ? "yes" : "no") << '\n';
    OutputFile file(o.csv_path, "CSV file");
    file.write(csv.str());
    file.close();  // throws where a write failed
  }
  return failures;
}

}  // namespace weft::cli
