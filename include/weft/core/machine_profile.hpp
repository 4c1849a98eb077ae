// What a machine can do, as the cost model and the heuristics need it: peak matrix rate and memory
// bandwidth of one GPU. Defaults are the figures measured on this workplace's H200s (a bf16
// 8192^3 GEMM at about 790 TFLOP/s; a device-to-device copy at about 4.3 TB/s counting bytes read and
// written); `weft tune --calibrate` is to measure and save them per machine.
#pragma once

namespace weft {

struct MachineProfile {
  double peak_flops = 790e12;           // bf16 dense, FLOP/s
  double memory_bytes_per_s = 4.3e12;   // HBM, bytes read + written per second
};

}  // namespace weft
