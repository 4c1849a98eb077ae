// `weft bench`: on GPUs, times strategies against the sequential baseline over a suite. Where no GPU
// is visible it says so, runs the plan checks on the CPU (all it can do) and exits 0 when they pass.
// Also `weft bench gemm`, which says so and exits kExitNoGpu (3) without a GPU.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "commands.hpp"
#include "gemm_bench.hpp"
#include "rmsnorm_bench.hpp"
#include "tilelink_bench.hpp"
#include "kernels_bench.hpp"
#include "attention_bench.hpp"
#include "bench_suite.hpp"
#include "common/text_file.hpp"
#include "on_gpus.hpp"
#include "progress.hpp"
#include "weft/plan/validation.hpp"
#include "weft/model/wave_partition.hpp"
#ifdef WEFT_HAVE_CUDA
#include "gpu_bench.hpp"
#include "measure.hpp"
#include "device_info.hpp"
#endif

namespace weft::cli {

namespace {

// --dtype and --scaling of weft bench and weft bench gemm: bf16, or e4m3 with tensor or row scales
// (the FP8 modes the overlap GEMM's epilogue and cuBLASLt's FP8 matmul both apply).
std::pair<DType, Scaling> operands_from(const Arguments& args) {
  const DType dtype = parse_dtype(args.text("dtype", "bf16"));
  if (dtype != DType::bf16 && dtype != DType::e4m3) throw std::invalid_argument("--dtype bf16 or e4m3");
  const std::string text = args.text("scaling", "");
  const Scaling scaling = parse_scaling(text.empty() ? "none" : text);
  if ((dtype == DType::e4m3) != (scaling == Scaling::tensor || scaling == Scaling::row))
    throw std::invalid_argument("--dtype e4m3 takes --scaling tensor or row (the overlap GEMM's FP8 epilogue applies those), bf16 none");
  return {dtype, scaling};
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
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  o.raster = parse_raster(args.text("raster", std::string(to_string(o.raster))));
  o.swizzle = static_cast<int>(args.integer("swizzle", o.swizzle));
  for (const std::string& g : args.list("gemm", {})) {
    const std::vector<int64_t> mnk = parse_shape(g);
    if (mnk.size() != 3) throw std::invalid_argument("--gemm takes MxNxK shapes, got '" + g + "'");
    o.shapes.push_back(GemmShape{mnk[0], mnk[1], mnk[2]});
  }
  if (const std::string machine = args.text("machine", ""); !machine.empty()) o.tile_rates = load_machine_profile(machine).tile_rates;
  std::tie(o.dtype, o.scaling) = operands_from(args);
  return on_gpus("bench gemm", "time", [&](const DeviceScan& scan) {
    const auto& d = scan.devices.front();
    std::printf("%s\n", software_versions().c_str());
    std::printf("GPU 0: %s, sm_%d%d, %d SMs; GEMM shapes of one rank at world size %d; tiles %s, swizzle %d\n\n", d.name.c_str(),
                d.compute_major, d.compute_minor, d.sm_count, o.world, std::string(to_string(o.raster)).c_str(), o.swizzle);
    const int failed = run_gemm_bench(suites, o);
    if (failed) std::printf("\n%d shape(s) did not match cuBLASLt\n", failed);
    return failed ? 1 : 0;
  }, o.csv_path);
}

int command_bench_rmsnorm(const Arguments& args) {
  std::vector<BenchSuite> suites;
  for (const auto& name : args.list("suite", {"flashoverlap_ar", "tilelink_mlp", "tilelink_moe"})) suites.push_back(load_suite(suite_path(name)));
  RmsnormBenchOptions o;
  o.world = static_cast<int>(args.integer("world", 2));
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 50));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  const std::string machine = args.text("machine", "");
  if (!machine.empty()) o.machine = load_machine_profile(machine);
  return on_gpus("bench rmsnorm", "time", [&](const DeviceScan& scan) {
    const auto& d = scan.devices.front();
    std::printf("GPU 0: %s, %d SMs; signal's result of rank 0 at world size %d, RMSNorm over its rows\n\n", d.name.c_str(), d.sm_count, o.world);
    const int failed = run_rmsnorm_bench(suites, o);
    if (failed) std::printf("\n%d row(s): the fused RMSNorm differed from the plain one\n", failed);
    return failed ? 1 : 0;
  }, o.csv_path);
}

int command_bench_attention(const Arguments& args) {
  AttentionBenchOptions o;
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  for (const std::string& a : args.list("attention", {})) {
    const std::vector<int64_t> t = parse_shape(a, 4);  // tokens, heads, kv heads, head dim
    o.shapes.push_back(AttentionShape{t[0], static_cast<int>(t[1]), static_cast<int>(t[2]), static_cast<int>(t[3])});
  }
  return on_gpus(
      "bench attention", "time",
      [&](const DeviceScan& scan) {
        const auto& d = scan.devices.front();
        std::printf("GPU 0: %s, %d SMs; weft's attention kernel alone, self-attention of one sequence\n\n", d.name.c_str(), d.sm_count);
        const int failed = run_attention_bench(o);
        if (failed) std::printf("\n%d run(s) differed from the host reference on their sampled rows\n", failed);
        return failed ? 1 : 0;
      },
      o.csv_path);
}

int command_bench_kernels(const Arguments& args) {
  std::vector<BenchSuite> suites;
  for (const auto& name : args.list("suite", {"default"})) suites.push_back(load_suite(suite_path(name)));
  KernelsBenchOptions o;
  o.world = static_cast<int>(args.integer("world", o.world));
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.seed = static_cast<uint64_t>(args.integer("seed", 1));
  o.csv_path = args.text("csv", "");
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  return on_gpus(
      "bench kernels", "time",
      [&](const DeviceScan& scan) {
        const auto& d = scan.devices.front();
        std::printf("GPU 0: %s, %d SMs; the suites' rows cut for %d ranks\n", d.name.c_str(), d.sm_count, o.world);
        const int failed = run_kernels_bench(suites, o);
        if (failed) std::printf("\n%d kernel result(s) differed from their reference\n", failed);
        return failed ? 1 : 0;
      },
      o.csv_path);
}

int command_bench_tilelink(const Arguments& args) {
  TilelinkBenchOptions o;
  o.ctas = args.integers("ctas", o.ctas);
  o.comm_sms = args.integers("comm-sms", o.comm_sms);
  const std::vector<std::string> gemms = args.list("gemm", {});
  if (!gemms.empty()) {
    o.gemms.clear();
    for (const std::string& g : gemms) o.gemms.push_back(parse_shape(g));
  }
  o.copy_mib = args.integer("copy-mib", o.copy_mib);
  o.comm_tile_rows = args.integer("comm-tile-rows", o.comm_tile_rows);
  o.warmup = static_cast<int>(args.integer("warmup", 5));
  o.iterations = static_cast<int>(args.integer("iterations", 20));
  o.csv_path = args.text("csv", "");
  if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
  const std::string machine = args.text("machine", "");
  if (!machine.empty()) o.machine = load_machine_profile(machine);
  return on_gpus("bench tilelink", "time", [&](const DeviceScan& scan) {
    const auto& d = scan.devices.front();
    std::printf("GPU 0: %s, sm_%d%d, %d SMs (%zu visible)\n\n", d.name.c_str(), d.compute_major, d.compute_minor, d.sm_count, scan.devices.size());
    const int failed = run_tilelink_bench(o);
    if (failed) std::printf("\n%d copy result(s) differed from their source\n", failed);
    return failed ? 1 : 0;
  }, o.csv_path);
}

namespace {

// Without a GPU: every strategy's plan of every suite row at its real size, validated statically
// (structure, liveness, signals, ordering, coverage), then small shapes proved with the reference
// executor. Returns the number of failures.
int check_suite_plans(const BenchSuite& suite, const std::vector<OpKind>& ops, const std::vector<std::string>& names,
                      const std::vector<int>& worlds, const PlanOptions& options, uint64_t seed, DType dtype, Scaling scaling) {
  int failed = 0, validated = 0;
  Progress progress("weft bench", "suite rows x world sizes", suite.rows.size() * worlds.size());
  std::printf("%-22s %-9s %5s %-26s %s\n", "row", "op", "world", "strategy", "real-sized plan");
  for (const SuiteRow& row : suite.rows) {
    if (std::find(ops.begin(), ops.end(), row.op) == ops.end()) {
      progress.step(worlds.size());
      continue;
    }
    for (int world : worlds) {
      progress.step();
      Problem p;
      try {
        p = problem_for(row, world, seed, dtype, scaling);
      } catch (const std::invalid_argument& e) {
        std::printf("%-22s %-9s %5d %-26s declined: %s\n", row.name.c_str(), std::string(to_string(row.op)).c_str(), world, "-", e.what());
        continue;
      }
      for (const std::string& name : names) {
        const Strategy& s = find_strategy(name);
        if (!s.supports(p.op)) continue;
        Plan plan;
        try {
          require_plan_fits(p, resolve_options(s, p, options));
          plan = make_plan(s, p, options);
        } catch (const std::invalid_argument& e) {
          std::printf("%-22s %-9s %5d %-26s declined: %s\n", row.name.c_str(), std::string(to_string(p.op)).c_str(), world, name.c_str(), e.what());
          continue;
        }
        const ValidationReport report = validate_plan(plan);
        ++validated;
        failed += !report.ok();
        std::printf("%-22s %-9s %5d %-26s %s\n", row.name.c_str(), std::string(to_string(p.op)).c_str(), world, plan.strategy.c_str(),
                    report.ok() ? "valid" : "INVALID");
        if (!report.ok()) std::printf("%s", report.summary().c_str());
      }
    }
  }
  progress.finish();
  std::printf("suite '%s': %d real-sized plan(s) validated, %d invalid\n\n", suite.name.c_str(), validated, failed);
  if (validated == 0) {
    // Every row declined (or none has the ops asked for): nothing was checked, and that is no pass.
    std::printf("suite '%s': no real-sized plan was validated (every row was declined or has none of the ops asked for)\n\n", suite.name.c_str());
    ++failed;
  }
  return failed + run_plan_checks(ops, names, worlds, seed, 0, false, "weft bench");
}

}  // namespace

int command_bench(const Arguments& args) {
  const std::vector<OpKind> ops = ops_from(args, /*with_attention=*/true);  // a suite's ag_attention rows too (attention_sp)
  const std::vector<std::string> names = strategies_from(args);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));
  const BenchSuite suite = load_suite(suite_path(args.text("suite", "default")));
  PlanOptions knobs = plan_options_from(args);  // machine, chunked and tilelink knobs
  signal_options_from(args, knobs);
  const auto [dtype, scaling] = operands_from(args);

#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    const bool prints = bench::prints_for_every_rank();  // under a launcher, rank 0 alone
    for (const auto& d : scan.devices)
      if (prints)
        std::printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", d.index, d.name.c_str(), d.compute_major, d.compute_minor,
                    d.sm_count, static_cast<double>(d.memory_bytes) / (1u << 30));
    if (prints) std::printf("%s\n", software_versions().c_str());
    GpuBenchOptions o;
    o.ops = ops;
    o.strategies = names;
    o.seed = seed;
    o.warmup = static_cast<int>(args.integer("warmup", 5));
    o.iterations = static_cast<int>(args.integer("iterations", 20));
    o.json_path = args.text("json", "");
    o.csv_path = args.text("csv", "");
    if (!o.json_path.empty()) require_writable(o.json_path, "JSON file");  // before the timing, not after it
    if (!o.csv_path.empty()) require_writable(o.csv_path, "CSV file");
    o.plan = knobs;
    o.dtype = dtype;
    o.scaling = scaling;
    if (prints)
      std::printf("machine profile: %s (%s): %.0f TFLOP/s, %.2f TB/s\n", o.plan.machine.device.c_str(), o.plan.machine.source.c_str(),
                  o.plan.machine.peak_flops * 1e-12, o.plan.machine.memory_bytes_per_s * 1e-12);
    o.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
    if (prints) std::printf("suite '%s': %s\n\n", suite.name.c_str(), suite.description.c_str());
    const int failed = run_gpu_bench(suite, o);
    if (failed && prints) std::printf("\n%d row(s) did not match sequential\n", failed);
    return failed ? 1 : 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  // Nothing is timed here: an option that only shapes timing or its output cannot be honoured.
  for (const char* timing_only : {"json", "csv", "warmup", "iterations"})
    if (!args.text(timing_only, "").empty())
      throw std::invalid_argument("--" + std::string(timing_only) + " needs a GPU to time on, and there is none (" + why +
                                  "); without one weft bench only checks the suite's plans on the CPU");
  const std::vector<int> worlds = args.integers("world", {2, 4, 8});
  for (int w : worlds)
    if (w > kMaxPlanWorld)
      throw std::invalid_argument("--world " + std::to_string(w) + ": plans are checked on the CPU up to " + std::to_string(kMaxPlanWorld) + " ranks");
  knobs.tile_m = 128;
  knobs.tile_n = 256;  // the tile weft bench gives library-GEMM strategies
  // FP8: the plans a GPU run would time, those the CUDA executor lowers (the others decline, saying why).
  if (is_fp8(dtype)) knobs.gpu_lowerable_only = true;
  std::printf("weft bench: no GPU (%s).\nNothing is timed; checking the plans of suite '%s' (%zu rows) on the CPU instead.\n", why.c_str(),
              suite.name.c_str(), suite.rows.size());
  if (is_fp8(dtype))
    std::printf("operands: %s with %s scales (the plans the GPU would run; the small-shape proofs below are bf16's: weft check --dtype proves FP8)\n",
                std::string(to_string(dtype)).c_str(), std::string(to_string(scaling)).c_str());
  std::printf("\n");
  return check_suite_plans(suite, ops, names, worlds, knobs, seed, dtype, scaling) == 0 ? 0 : 1;
}

}  // namespace weft::cli
