// The attention kernel's answer checked where a full host reference would take too long: softmax(Q
// K^T / sqrt(d)) V in double at chosen (query row, head) pairs of a self-attention over one sequence,
// q [tokens, heads * d], k and v [tokens, kv_heads * d], bf16 row-major on the device, causal by row
// (query i sees keys 0..i), GQA (head h reads kv head h / (heads / kv_heads)). `weft bench
// attention` and the GPU tests at the benchmark's sizes use it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "measure.hpp"
#include "weft/kernels/attention.hpp"

namespace weft::bench {

struct AttentionCheckShape {
  int64_t tokens;
  int heads, kv_heads, head_dim;
  bool causal;
};

// One sequence's self-attention on the device as `weft bench attention` and the GPU tests at its
// sizes run it: q, k and v random bf16 (seeds seed, seed + 1, seed + 2; dense rows of heads x d
// columns), o poisoned (NaN), lse, the KV tile table cut as the plans cut it (one piece, the
// kernel's tile_kv rows, per tile) in device memory, and the launch over them (checked).
struct SelfAttentionRun {
  SelfAttentionRun(const AttentionCheckShape& shape, uint64_t seed, cudaStream_t stream);
  AttentionCheckShape shape;
  DeviceBuffer q, k, v, o, lse;
  std::vector<AttentionKvTile> tiles;
  DeviceBuffer table;
  AttentionLaunch launch;
  // Poisons o again (on `stream`), for a launch whose writes are to be checked.
  void poison_output(cudaStream_t stream) const;
};

// The largest error of o at the samples (row, head), in units of that row's softmax-weighted |v|
// (two bf16 roundings, P's and O's, come to about 2^-8 of it); NaN where o is not finite there.
double attention_sampled_error(const AttentionCheckShape& s, const void* q, const void* k, const void* v, const void* o,
                               const std::vector<std::pair<int64_t, int>>& samples);

}  // namespace weft::bench
