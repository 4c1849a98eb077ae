// Commands that measure the machine rather than a strategy: `weft characterize` (FiCCO's
// decomposition and contention losses) and `weft tune --calibrate` (the machine profile). Without a
// GPU each says so and exits 0.
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "characterize.hpp"
#include "commands.hpp"
#include "partition_study.hpp"
#include "bench_suite.hpp"
#include "weft/model/machine_profile.hpp"
#ifdef WEFT_HAVE_CUDA
#include "calibrate.hpp"
#include "device_info.hpp"
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
  const bool calibrate = args.flag("calibrate"), partitions = args.flag("partitions");
  if (calibrate == partitions) throw std::invalid_argument("weft tune: give exactly one of --calibrate or --partitions");
  const int warmup = static_cast<int>(args.integer("warmup", partitions ? 3 : 5));
  const int iterations = static_cast<int>(args.integer("iterations", 20));
  const std::string out = calibrate ? args.text("out", "machine_profile.json") : "";
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
    study.gemm_sms = static_cast<int>(args.integer("gemm-sms", 0));
    const std::string restore = args.text("restore", "");
    if (!restore.empty()) study.signal_restore = parse_signal_restore(restore);
    const std::string machine = args.text("machine", "");
    if (!machine.empty()) study.machine = load_machine_profile(machine);
  }
#ifdef WEFT_HAVE_CUDA
  const DeviceScan scan = scan_devices();
  if (!scan.devices.empty()) {
    if (partitions) {
      study.world_sizes = world_sizes_from(args, static_cast<int>(scan.devices.size()));
      std::printf("suite '%s'; machine profile: %s (%s)\n\n", suite.name.c_str(), study.machine.device.c_str(), study.machine.source.c_str());
      const int failed = run_partition_study(suite, study);
      if (failed) std::printf("\n%d partition(s) did not match sequential\n", failed);
      return failed ? 1 : 0;
    }
    const MachineProfile p = calibrate_machine(warmup, iterations);
    std::ofstream file(out);
    file << machine_profile_json(p);
    if (!file) throw std::runtime_error("weft tune: cannot write '" + out + "'");
    std::printf("peak %.0f TFLOP/s, memory %.2f TB/s, %zu collective curves -> %s (use with --machine %s)\n", p.peak_flops * 1e-12,
                p.memory_bytes_per_s * 1e-12, p.collectives.size(), out.c_str(), out.c_str());
    return 0;
  }
  const std::string why = scan.why_none;
#else
  const std::string why = "weft was built without CUDA";
#endif
  args.text("world", "");
  std::printf("weft tune: no GPU found (%s); nothing to measure.\n", why.c_str());
  return 0;
}

}  // namespace weft::cli
