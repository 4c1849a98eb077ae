// Commands that measure the machine rather than a strategy: `weft characterize` (FiCCO's
// decomposition and contention losses) and `weft tune --calibrate` (the machine profile). Without a
// GPU each says so and exits 0.
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "characterize.hpp"
#include "commands.hpp"
#include "weft/core/bench_suite.hpp"
#include "weft/core/machine_profile.hpp"
#ifdef WEFT_HAVE_CUDA
#include "calibrate.hpp"
#include "weft/runtime/device_info.hpp"
#endif

namespace weft::cli {

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
    o.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
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

}  // namespace weft::cli
