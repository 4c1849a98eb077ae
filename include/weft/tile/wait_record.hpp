// Where a bounded device-side wait reports that it gave up: host and device see the same record
// (pinned, mapped memory), the first wait of a launch that times out fills it, and the host turns it
// into an error naming the signal (CudaExecutor::check, DeviceWaitTimeout).
#pragma once

#include <cstdint>

namespace weft {
namespace tile {

// Who waited: a kernel of the user's (TileLink's primitives), the overlap GEMM, weft's companion
// kernel of SM-driven tile steps, the attention kernel (where: its KV tile), the device barrier at
// the start of a call (signal: the late rank);
// and not a wait but a disagreement: a peer met in the device barrier is making another call
// (signal: that rank; expected: this rank's call signature, observed: the peer's).
enum WaitSource : int32_t {
  kWaitInUserKernel = 0,
  kWaitInOverlapGemm = 1,
  kWaitInTileProgram = 2,
  kWaitInBarrier = 3,
  kOtherCallInBarrier = 4,
  kWaitInAttention = 5,
  // Not a wait: a MoE choice given on the device that names no expert (where: its (token, choice)
  // pair; expected: the experts; observed: the value). The route skips it; the result is wrong.
  kBadMoeChoice = 6,
};

struct WaitRecord {
  uint32_t failed = 0;
  int32_t signal = -1;   // the counter's index in the waiting rank's signal array
  int32_t where = -1;    // the GEMM's table entry, the tile program's item, or the user's tile
  int32_t source = 0;    // WaitSource
  uint64_t expected = 0;
  uint64_t observed = 0;
};

}  // namespace tile
using tile::WaitRecord;
}  // namespace weft
