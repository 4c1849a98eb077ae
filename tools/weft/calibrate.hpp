// `weft tune --calibrate`: measures the local GPU 0's machine profile (machine_profile.hpp): the
// peak bf16 matrix rate as cuBLASLt's best of a few large GEMMs, and the HBM bandwidth as a large
// device-to-device copy (bytes read + written). Medians of timed repetitions after warm-up.
#pragma once

#include "weft/core/machine_profile.hpp"

namespace weft::cli {

MachineProfile calibrate_machine(int warmup, int iterations);

}  // namespace weft::cli
