// What a machine can do, as the cost model and the heuristics need it: peak matrix rate and memory
// bandwidth of one GPU. Defaults are the figures measured on this workplace's H200s (a bf16
// 8192^3 GEMM at about 790 TFLOP/s; a device-to-device copy at about 4.3 TB/s counting bytes read and
// written). `weft tune --calibrate` measures them on the local GPU and writes a JSON file that
// `--machine FILE` (weft bench, plan, check) reads back:
//   { "device": "NVIDIA H200", "peak_flops": 7.9e14, "memory_bytes_per_s": 4.3e12, "source": "..." }
#pragma once

#include <string>
#include <string_view>

namespace weft {

struct MachineProfile {
  double peak_flops = 790e12;           // bf16 dense, FLOP/s
  double memory_bytes_per_s = 4.3e12;   // HBM, bytes read + written per second
  std::string device = "defaults (H200 figures)";
  std::string source = "built-in defaults";
};

std::string machine_profile_json(const MachineProfile& profile);
// Throws std::invalid_argument naming the field when one is missing or not positive.
MachineProfile parse_machine_profile(std::string_view json);
MachineProfile load_machine_profile(const std::string& path);

}  // namespace weft
