// `weft tune --calibrate`: measures the local GPU 0's machine profile (machine_profile.hpp): the
// peak bf16 matrix rate as cuBLASLt's best of a few large GEMMs, and the HBM bandwidth as a large
// device-to-device copy (bytes read + written), its SM count, and the latency curves of NCCL's
// all-reduce and reduce-scatter at world sizes 2, 4, 8 (as many GPUs as are visible). Medians of timed
// repetitions after warm-up.
#pragma once

#include "weft/model/machine_profile.hpp"

namespace weft::cli {

MachineProfile calibrate_machine(int warmup, int iterations);

}  // namespace weft::cli
