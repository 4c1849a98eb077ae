// The simulator: the plan's third executor. It replays a plan against a machine profile and
// predicts each rank's time for one call, so that strategies and their knobs can be ranked without a
// GPU and at world sizes no machine here has.
//
//   Simulation s = simulate(plan, machine);        // s.seconds: the slowest rank's time
//   std::ofstream("trace.json") << chrome_trace(plan, s);   // opens in Perfetto / chrome://tracing
//
// The model, step by step (every constant comes from the MachineProfile):
//   - a call starts with the executor's barrier where the plan reaches peers (barrier_seconds);
//   - a stream runs its steps in order; a step starts when its waits are met and, if it needs SMs
//     (GEMMs, NCCL, reductions, permutations, box moves, SM copies), the SMs are there: a
//     persistent GEMM on every SM holds them until it ends (what the executor's overlap strategies
//     leave collective_sms for), and a rank runs one GEMM at a time;
//   - a GEMM is simulated tile by tile: CTA c takes table entries c, c + grid, ...; an entry starts
//     when its CTA is free and its wait is met, takes 2 tm tn k / (peak_flops * gemm_efficiency *
//     tile rate / sm_count) (K splits: their share plus the fix-up), and notifies when done; the
//     whole GEMM is no faster than its bytes at memory_bytes_per_s; tiles run gemm_slowdown_beside_copies
//     slower while peer copies run on the GPU. A plain table on cuBLASLt is costed the same way with
//     128x256 tiles;
//   - an attention step is simulated as a GEMM is: a CTA per (query tile, head) on the SMs it may
//     use, each walking the KV tiles in the step's order, waiting for each; a KV tile costs 4 q k d
//     FLOPs at peak_flops * attention_efficiency / sm_count, and is skipped (no FLOPs, no wait) where
//     the causal mask hides it from the whole query tile;
//   - copies move their bytes with fair sharing: a transfer between two GPUs gets at most
//     link_bytes_per_s and shares each GPU's nvlink_bytes_per_s, per direction, with the others
//     (SM copies: sm_copy_bytes_per_s_per_sm per SM); a local copy reads and writes HBM;
//   - a collective starts when every rank has reached it and lasts the profile's curve for its kind,
//     world size and bytes (times its overlapped_slowdown while a GEMM runs beside it);
//   - reductions, permutations and box moves are memory bound; a reduction on a few SMs (a
//     companion's) also moves every byte it reads or writes through them, at
//     sm_reduce_bytes_per_s_per_sm each;
//   - every step pays launch_seconds, every copy copy_latency_seconds.
#pragma once

#include <string>
#include <vector>

#include "weft/ir/plan.hpp"
#include "weft/model/machine_profile.hpp"

namespace weft {

struct SimulatedStep {
  int rank = 0;
  int stream = 0;
  int step = 0;  // index in the rank's steps
  double start = 0, end = 0;  // seconds from the call's start
};

struct Simulation {
  double seconds = 0;                // the slowest rank
  std::vector<double> rank_seconds;  // each rank's end
  std::vector<SimulatedStep> steps;  // every step that ran, in start order
  // Empty unless the replay stopped with work left (a plan that would hang): which waits are unmet.
  std::string stuck;
};

Simulation simulate(const Plan& plan, const MachineProfile& machine);

// The simulation as Chrome/Perfetto trace JSON: a process per rank, a thread per stream, a slice per
// step (named by its label), times in microseconds.
std::string chrome_trace(const Plan& plan, const Simulation& simulation);

}  // namespace weft
