// What a machine can do, as the cost model and the heuristics need it: peak matrix rate and memory
// bandwidth of one GPU, its SM count, and how long each NCCL collective takes against its size
// (FlashOverlap's bandwidth curves, Section 4.2.1). Defaults are the figures measured on this
// workplace's H200s (a bf16 8192^3 GEMM at about 790 TFLOP/s; a device-to-device copy at about
// 4.3 TB/s counting bytes read and written; 256 MB all-reduce 1.28 ms and reduce-scatter 0.76 ms on
// 4 GPUs). `weft tune --calibrate` measures them on the local GPUs and writes a JSON file that
// `--machine FILE` (weft bench, plan, check, tune) reads back:
//   { "device": "NVIDIA H200", "peak_flops": 7.9e14, "memory_bytes_per_s": 4.3e12, "sm_count": 132,
//     "collective_sms": 16, "collectives": [ { "kind": "all_reduce", "world_size": 4,
//     "bytes": [...], "seconds": [...] }, ... ], "source": "..." }
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "weft/ir/plan.hpp"
#include "weft/model/tiling.hpp"

namespace weft {

// Latency of one NCCL call against the bytes of the buffer each rank passes (the send buffer:
// all_reduce and reduce_scatter its whole input), sampled at increasing sizes.
struct CollectiveCurve {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int world_size = 2;
  std::vector<double> bytes;    // strictly increasing
  std::vector<double> seconds;  // one per entry of bytes
  // How much longer the collective takes while a GEMM runs beside it on the other SMs (fewer SMs,
  // shared HBM and L2): signal's predictor multiplies the curve by it. Fitted by `weft tune
  // --partitions` against measured partitions; 1 until then.
  double overlapped_slowdown = 1.0;

  bool operator==(const CollectiveCurve&) const = default;
};

struct MachineProfile {
  double peak_flops = 790e12;           // bf16 dense, FLOP/s
  // The FP8 (e4m3/e5m2) dense rate over peak_flops. 2 on H100 and H200 SXM: NVIDIA's datasheets give
  // 1,979 dense FP8 TFLOPS against 989 bf16. A datasheet ratio; the shipped H200 profile gives the
  // rate the recorded FP8 calls fit (bench/machines/h200.json: 1.8).
  double fp8_speedup = 2.0;
  double memory_bytes_per_s = 4.3e12;   // HBM, bytes read + written per second
  int sm_count = 132;
  // SMs a wave-grouped GEMM leaves to the NCCL kernels that run beside it (FlashOverlap, Alg. 1
  // line 3); the GEMM's waves are sm_count - collective_sms tiles.
  // 32: on 2xH200 a signal GEMM on 100 SMs beat 116 (bench/results/README.md).
  int collective_sms = 32;
  std::vector<CollectiveCurve> collectives;
  // What each extra collective costs when it runs beside the GEMM, beyond its curve (launch, the
  // stream wait, NCCL's start on the few SMs it has): FlashOverlap's "frequent API calls" (Section
  // 4.1.1). Fitted by `weft tune --partitions` against measured partitions.
  double overlapped_call_seconds = 0;
  // FiCCO's machine threshold (ficco_heuristic.hpp): the GEMM time at peak rate below which
  // uniform_fused_1d is picked, above five times which hetero_unfused_1d. The paper tunes it once per
  // machine ("one-time tuning cost for thresholds"); 1 ms is our reading of its Figure 12(a).
  double ficco_threshold_seconds = 1e-3;
  // What the simulator (model/simulator.hpp) needs beyond the above; defaults are H200 figures
  // (DEVELOPERS: copy engine ~380 GB/s per peer; NVLink 4 is 450 GB/s per direction per GPU).
  double gemm_efficiency = 0.95;            // a library GEMM's achieved fraction of peak_flops (128x256 tiles)
  double overlap_gemm_efficiency = 0.95;    // the overlap GEMM's rate relative to that (its own tile table)
  // With FP8 operands, the overlap GEMM's FP8 main loop against the library's FP8 GEMM, on top of
  // overlap_gemm_efficiency. The built-in value is an early estimate; a profile gives the rate its
  // recorded FP8 calls fit (the shipped H200 profile's, beside its fp8_speedup; bench/results/README.md
  // has the fits and `weft bench gemm --dtype e4m3` the kernel's own ratio). Not measured on H100.
  double fp8_overlap_gemm_rate = 0.72;
  // An attention kernel's achieved fraction of peak_flops, counting 4 q k d FLOPs per unmasked block
  // of q queries and k keys. Not measured here (weft's attention kernel has not run yet): FlashAttention-3 reports
  // about 75% of an H100's peak at head dim 128 and long sequences, less for short ones.
  double attention_efficiency = 0.6;
  double gemm_fixed_seconds = 6e-6;         // a GEMM launch's fixed cost (launch, ramp-up, last wave's tail)
  double link_bytes_per_s = 380e9;          // one copy-engine transfer between two GPUs
  double nvlink_bytes_per_s = 450e9;        // all of one GPU's peer traffic, each direction
  double copy_latency_seconds = 4e-6;       // a copy's fixed cost (setup, first bytes)
  double launch_seconds = 3e-6;             // a kernel's or stream operation's fixed cost
  double sm_copy_bytes_per_s_per_sm = 20e9;  // an SM-driven peer copy, per SM it runs on
  // A reduction on a few SMs (a companion kernel's share): every byte it reads or writes, local or a
  // peer's, passes through those SMs, at this rate per SM (its loads have less in flight than a copy's).
  double sm_reduce_bytes_per_s_per_sm = 20e9;
  double barrier_seconds = 12e-6;           // the device barrier a peer-touching call starts with
  double gemm_slowdown_beside_copies = 1.03;  // a GEMM's tiles while peer copies run on its GPU (HBM, L2)
  // The overlap GEMM's 128-row tiles' compute rates relative to 128x256 on this GPU, which the
  // tiling rule weighs tiles by (model/tiling.hpp; `weft tune --calibrate` measures them). Empty:
  // the rule's built-in estimates.
  TileRates tile_rates;
  // How far the simulator's predictions for each strategy were from measurements on this machine:
  // mean signed relative error (predicted / measured - 1) and mean absolute relative error, by
  // strategy name. `auto` corrects a prediction by the bias and trusts a predicted gain over
  // sequential only beyond the error. Written by weft tune --fit-simulator.
  struct PredictionAccuracy {
    double bias = 0;
    double error = 0;
    bool operator==(const PredictionAccuracy&) const = default;
  };
  std::map<std::string, PredictionAccuracy> prediction_accuracy;
  // The same over FP8 rows (weft tune --fp8-accuracy): FP8 GEMMs run at their own rates, so the
  // bf16 biases misjudge FP8 calls. Empty: FP8 calls use prediction_accuracy.
  std::map<std::string, PredictionAccuracy> fp8_prediction_accuracy;
  // The accuracy auto corrects a prediction for a call of `dtype` by.
  const std::map<std::string, PredictionAccuracy>& accuracy_for(DType dtype) const {
    return is_fp8(dtype) && !fp8_prediction_accuracy.empty() ? fp8_prediction_accuracy : prediction_accuracy;
  }
  std::string device = "defaults (H200 figures)";
  std::string source = "built-in defaults";

  // Interpolates the curve of (kind, world_size) linearly in bytes (below the first sample: its
  // time; above the last: the last segment extended). Without a curve, a latency-bandwidth line
  // through the built-in figures above.
  double collective_seconds(CollectiveKind kind, int world_size, double bytes) const;
  const CollectiveCurve* curve(CollectiveKind kind, int world_size) const;
  // The curve's overlapped_slowdown; 1 without a curve.
  double overlapped_slowdown(CollectiveKind kind, int world_size) const;
  bool operator==(const MachineProfile&) const = default;
};

std::string machine_profile_json(const MachineProfile& profile);
// Strict JSON (src/common/json.hpp). Every field is checked against a plausible range (positive,
// finite, within what a GPU can be); errors read "NAME: byte N: FIELD: ...".
MachineProfile parse_machine_profile(std::string_view json, const std::string& name = "machine profile");
MachineProfile load_machine_profile(const std::string& path);

CollectiveKind parse_collective_kind(std::string_view text);  // throws std::invalid_argument

}  // namespace weft
