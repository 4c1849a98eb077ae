// `weft bench`: on GPUs, times strategies against the sequential baseline over a suite. Where no GPU
// is visible it says so, runs the plan checks on the CPU (all it can do) and exits 0 when they pass.
// Also `weft bench gemm` and `weft characterize`, which say so and exit 0 without a GPU.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "characterize.hpp"
#include "commands.hpp"
#include "gemm_bench.hpp"
#include "weft/core/bench_suite.hpp"
#ifdef WEFT_HAVE_CUDA
#include "calibrate.hpp"
#include "gpu_bench.hpp"
#include "weft/runtime/device_info.hpp"
#endif

namespace weft::cli {

namespace {

std::string suite_path(const std::string& name) {
  if (name.find('/') != std::string::npos || name.ends_with(".json")) return name;
  return std::string(WEFT_BENCH_DIR) + "/" + name + ".json";
}

}  // namespace

int command_bench_gemm(const Arguments& args) {
  std::vector<BenchSuite> suites;
  for (const auto& name : args.list("suite", {"default", "tilelink_mlp", "flux_gpt3", "flashoverlap_ar"}))
    suites.push_back(load_suite(suite_path(name)));
  GemmBenchOptions o;
  o.world = static_cast<int>(args.integer("world", 4));
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    const auto& d = scan.devices.front();
    std::printf("GPU 0: %s, sm_%d%d, %d SMs; GEMM shapes of one rank at world size %d\n\n", d.name.c_str(), d.compute_major,
                d.compute_minor, d.sm_count, o.world);
    const int failed = run_gemm_bench(suites, o);
    if (failed) std::printf("\n%d shape(s) did not match cuBLASLt\n", failed);
    return failed ? 1 : 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  std::printf("weft bench gemm: no GPU found (%s); nothing to time.\n", why.c_str());
  return 0;
}

int command_characterize(const Arguments& args) {
  const BenchSuite suite = load_suite(suite_path(args.text("suite", "tilelink_mlp")));
  CharacterizeOptions o;
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    const int visible = static_cast<int>(scan.devices.size());
    for (const auto& w : args.list("world", {std::to_string(visible)})) {
      const int world = std::stoi(w);
      if (world < 1 || world > visible)
        throw std::invalid_argument("--world " + w + ": only " + std::to_string(visible) + " GPU(s) are visible");
      o.world_sizes.push_back(world);
    }
    std::printf("suite '%s', AllGather+GEMM rows; %s\n\n", suite.name.c_str(), scan.devices.front().name.c_str());
    run_characterize(suite, o);
    return 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  args.text("world", "");
  std::printf("weft characterize: no GPU found (%s); nothing to measure.\n", why.c_str());
  return 0;
}

int command_tune(const Arguments& args) {
  if (!args.flag("calibrate")) throw std::invalid_argument("weft tune: only --calibrate exists so far");
  const std::string out = args.text("out", "machine_profile.json");
  const int warmup = static_cast<int>(args.integer("warmup", 5));
  const int iterations = static_cast<int>(args.integer("iterations", 20));
#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    const MachineProfile p = calibrate_machine(warmup, iterations);
    std::ofstream file(out);
    file << machine_profile_json(p);
    if (!file) throw std::runtime_error("weft tune: cannot write '" + out + "'");
    std::printf("peak %.0f TFLOP/s, memory %.2f TB/s -> %s (use with --machine %s)\n", p.peak_flops * 1e-12,
                p.memory_bytes_per_s * 1e-12, out.c_str(), out.c_str());
    return 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  std::printf("weft tune: no GPU found (%s); nothing to calibrate.\n", why.c_str());
  return 0;
}

int command_bench(const Arguments& args) {
  const std::vector<OpKind> ops = ops_from(args);
  const std::vector<std::string> names = strategies_from(args);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));
  const BenchSuite suite = load_suite(suite_path(args.text("suite", "default")));

#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    for (const auto& d : scan.devices)
      std::printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", d.index, d.name.c_str(), d.compute_major, d.compute_minor,
                  d.sm_count, static_cast<double>(d.memory_bytes) / (1u << 30));
    GpuBenchOptions o;
    o.ops = ops;
    o.strategies = names;
    o.seed = seed;
    o.warmup = static_cast<int>(args.integer("warmup", 5));
    o.iterations = static_cast<int>(args.integer("iterations", 20));
    o.json_path = args.text("json", "");
    o.csv_path = args.text("csv", "");
    const std::string machine = args.text("machine", "");
    if (!machine.empty()) o.machine = load_machine_profile(machine);
    std::printf("machine profile: %s (%s): %.0f TFLOP/s, %.2f TB/s\n", o.machine.device.c_str(), o.machine.source.c_str(),
                o.machine.peak_flops * 1e-12, o.machine.memory_bytes_per_s * 1e-12);
    const int visible = static_cast<int>(scan.devices.size());
    for (const auto& w : args.list("world", {std::to_string(visible)})) {
      const int world = std::stoi(w);
      if (world < 1 || world > visible)
        throw std::invalid_argument("--world " + w + ": only " + std::to_string(visible) + " GPU(s) are visible");
      o.world_sizes.push_back(world);
    }
    std::printf("suite '%s': %s\n\n", suite.name.c_str(), suite.description.c_str());
    const int failed = run_gpu_bench(suite, o);
    if (failed) std::printf("\n%d row(s) did not match sequential\n", failed);
    return failed ? 1 : 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  args.text("world", "");
  args.text("warmup", "");
  args.text("iterations", "");
  args.text("json", "");
  args.text("csv", "");
  args.text("machine", "");
  std::printf("weft bench: no GPU found (%s).\n", why.c_str());
  std::printf("Nothing can be timed on this machine; running the plan checks on the CPU instead (suite '%s' has %zu rows to time on GPUs).\n\n",
              suite.name.c_str(), suite.rows.size());
  return run_plan_checks(ops, names, {1, 2, 4, 8}, seed) == 0 ? 0 : 1;
}

}  // namespace weft::cli
