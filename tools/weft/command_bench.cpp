// `weft bench`: on GPUs, times strategies against the sequential baseline. Where no GPU is visible it
// says so, runs the plan checks on the CPU (all it can do) and exits 0 when they pass.
#include <cstdio>
#include <iostream>

#include "commands.hpp"
#ifdef WEFT_HAVE_CUDA
#include "weft/runtime/device_info.hpp"
#endif

namespace weft::cli {

int command_bench(const Arguments& args) {
  std::vector<OpKind> ops;
  for (const auto& name : args.list("op", {"ag_gemm", "gemm_rs", "gemm_ar", "gemm_a2a"})) ops.push_back(parse_op(name));
  std::vector<std::string> names;
  for (const auto& s : strategies()) names.push_back(s.name);
  names = args.list("strategy", names);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 1));

#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  const bool have_gpu = !scan.devices.empty();
  const std::string why = scan.why_none;
#else
  const bool have_gpu = false;
  const std::string why = "weft was built without CUDA";
#endif
  if (!have_gpu) {
    std::printf("weft bench: no GPU found (%s).\n", why.c_str());
    std::printf("Nothing can be timed on this machine; running the plan checks on the CPU instead.\n\n");
  } else {
#ifdef WEFT_HAVE_CUDA
    for (const auto& d : scan.devices)
      std::printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", d.index, d.name.c_str(), d.compute_major, d.compute_minor,
                  d.sm_count, static_cast<double>(d.memory_bytes) / (1u << 30));
#endif
    std::printf("weft bench: timing on GPUs is not built yet (the GPU runtime comes next); running the plan checks.\n\n");
  }
  return run_plan_checks(ops, names, {1, 2, 4, 8}, seed) == 0 ? 0 : 1;
}

}  // namespace weft::cli
