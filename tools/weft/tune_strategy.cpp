#include "tune_strategy.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "common/text_file.hpp"
#include "measure.hpp"
#include "weft/model/simulator.hpp"
#include "weft/plan/chunked.hpp"
#include "weft/plan/strategies.hpp"
#include "weft/cuda/check.hpp"
#include "weft/runtime/rank_threads.hpp"

namespace weft::cli {

using namespace weft::bench;

std::vector<TunedCandidate> knob_grid(const std::string& strategy, const Problem& p, const MachineProfile& machine) {
  std::vector<TunedCandidate> grid;
  if (strategy == "chunked") {
    std::vector<std::string> shapes;
    if (p.op == OpKind::ag_gemm) shapes = {"swizzle", "ring", "2d"};
    if (p.op == OpKind::gemm_rs) shapes = {"swizzle", "pull"};
    if (p.op == OpKind::gemm_ar) shapes = {"partition"};
    for (const std::string& shape : shapes)
      for (const char* chunks : {"1", "2", "4"}) {
        if (p.op == OpKind::gemm_ar) {
          grid.push_back({strategy, {{"template", shape}, {"chunks", chunks}}, 0});
          continue;
        }
        grid.push_back({strategy, {{"template", shape}, {"chunks", chunks}, {"backend", "copy_engine"}}, 0});
        for (const char* sms : {"16", "32"}) grid.push_back({strategy, {{"template", shape}, {"chunks", chunks}, {"backend", "sm"}, {"comm_sms", sms}}, 0});
      }
  } else if (strategy == "tilelink") {
    // The companion's CTAs: the best count depends on the shape (a memory-bound GEMM gives SMs up
    // cheaply, a compute-bound one does not; bench/results).
    for (const char* sms : {"16", "20", "32", "48"}) grid.push_back({strategy, {{"comm_sms", sms}}, 0});
  } else if (strategy == "fused" && p.op == OpKind::ag_gemm) {
    for (const char* chunks : {"1", "2", "4", "8"}) grid.push_back({strategy, {{"comm_chunks", chunks}}, 0});
  } else if (strategy == "signal") {
    for (int leave : {16, 32, 48})
      for (const char* restore : {"at_end", "own_stream"})
        grid.push_back({strategy, {{"gemm_sms", std::to_string(machine.sm_count - leave)}, {"restore", restore}}, 0});
  } else {
    grid.push_back({strategy, {}, 0});
  }
  return grid;
}

namespace {

std::string today() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

std::string describe(const TunedCandidate& c) {
  std::string text = c.strategy;
  for (const auto& [k, v] : c.options) text += " " + k + "=" + v;
  return text;
}

}  // namespace

int run_strategy_tuning(const BenchSuite& suite, const StrategyTuningOptions& o) {
  TuningTable table;
  if (std::filesystem::exists(o.out)) table = load_tuning_table(o.out);
  // Opened once the old table is read, before the timing: an unwritable path fails now.
  OutputFile file(o.out, "tuning table");
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  WEFT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  if (table.machine.empty()) table.machine = properties.name;
  PlanOptions base;
  base.tile_m = 128;
  base.tile_n = 256;
  base.machine = o.machine;
  const Strategy& strategy = find_strategy(o.strategy);
  int failures = 0;
  std::printf("%-22s %-9s %5s %-54s %10s %10s %8s %s\n", "row", "op", "world", "candidate", "predicted", "measured", "speedup", "check");
  for (int world : o.world_sizes) {
    auto group = first_gpus(world);
    for (const SuiteRow& row : suite.rows) {
      if (std::find(o.ops.begin(), o.ops.end(), row.op) == o.ops.end() || !strategy.supports(row.op)) continue;
      Problem problem;
      try {
        problem = problem_for(row, world, o.seed);
      } catch (const std::invalid_argument&) {
        continue;
      }
      // Every setting predicted; the best `keep` measured.
      std::vector<std::pair<double, TunedCandidate>> predicted;
      for (const TunedCandidate& c : knob_grid(o.strategy, problem, o.machine)) {
        try {
          predicted.push_back({simulate(make_plan(strategy, problem, apply_candidate(base, c)), o.machine).seconds * 1e3, c});
        } catch (const std::invalid_argument&) {
          // the setting does not build this shape
        }
      }
      std::stable_sort(predicted.begin(), predicted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (predicted.size() > static_cast<size_t>(o.keep)) predicted.resize(static_cast<size_t>(o.keep));
      std::vector<Plan> plans{plan_sequential(problem, base)};
      for (const auto& [ms, c] : predicted) plans.push_back(make_plan(strategy, problem, apply_candidate(base, c)));
      const size_t count = plans.size();
      std::vector<std::vector<double>> medians(count, std::vector<double>(static_cast<size_t>(world))), errors = medians;
      std::barrier sync(world);
      for_each_rank(group, [&](Communicator& comm) {
        const auto rank = static_cast<size_t>(comm.rank());
        cudaStream_t stream;
        WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        std::vector<std::unique_ptr<CudaExecutor>> execs;
        for (const Plan& plan : plans) {
          execs.push_back(std::make_unique<CudaExecutor>(comm, plan, ExecutorOptions{.validate = false}));
          fill_buffers(*execs.back(), comm.rank(), o.seed, stream);
        }
        double* sums = nullptr;
        WEFT_CUDA_CHECK(cudaMalloc(&sums, 3 * sizeof(double)));
        execs[0]->run(stream);
        finish_or_explain(*execs[0], stream, "sequential");
        for (size_t p = 1; p < count; ++p) errors[p][rank] = run_against_device_result(*execs[p], execs[0]->output(), sums, stream, plans[p].strategy);
        std::vector<std::function<void(cudaStream_t)>> variants;
        for (size_t p = 0; p < count; ++p) variants.push_back([&, p](cudaStream_t s) { execs[p]->run(s); });
        const std::vector<double> ms = interleaved_call_medians_ms(
            comm, [&] { sync.arrive_and_wait(); }, stream, o.warmup, o.iterations, variants,
            [&](size_t p) { finish_or_explain(*execs[p], stream, plans[p].strategy); });
        for (size_t p = 0; p < count; ++p) medians[p][rank] = ms[p];
        cudaFree(sums);
        execs.clear();
        cudaStreamDestroy(stream);
      });
      auto worst = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
      TuningEntry entry;
      entry.op = problem.op;
      entry.world = world;
      entry.m = problem.m;
      entry.n = problem.n;
      entry.k = problem.k;
      if (is_moe(problem.op)) {  // MoE rows of one m, n and k differ by these (tuning_table.hpp)
        entry.experts = problem.experts;
        entry.topk = problem.topk;
      }
      entry.source = "weft tune --strategy " + o.strategy + ", " + properties.name + " x " + std::to_string(world) + ", " + today();
      entry.candidates.push_back({"sequential", {}, worst(medians[0])});
      for (size_t p = 1; p < count; ++p) {
        const bool ok = worst(errors[p]) <= 2e-2;
        failures += !ok;
        TunedCandidate c = predicted[p - 1].second;
        c.ms = worst(medians[p]);
        std::printf("%-22s %-9s %5d %-54s %10.3f %10.3f %8.3f %s\n", row.name.c_str(), std::string(to_string(problem.op)).c_str(), world,
                    describe(c).c_str(), predicted[p - 1].first, c.ms, entry.candidates[0].ms / c.ms, ok ? "ok" : "MISMATCH");
        if (ok) entry.candidates.push_back(c);
      }
      std::fflush(stdout);
      // This shape's earlier entry keeps what this run did not measure.
      merge_entry(table, entry);
    }
  }
  file.write(tuning_table_json(table));
  file.close();
  std::printf("\n%zu shapes in %s\n", table.entries.size(), o.out.c_str());
  return failures;
}

}  // namespace weft::cli
