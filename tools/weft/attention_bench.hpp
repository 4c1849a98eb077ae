// `weft bench attention` on one GPU: weft's attention kernel (kernels/attention.hpp) alone, causal
// and not, over attention shapes of one rank, in TFLOP/s. FLOPs are counted as the kernel computes
// them: 4 * tile_q * tile_kv * head_dim per (query tile, KV piece, head) the causal mask does not
// skip (attention_tiles_computed; a partly masked tile counts whole).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::cli {

// Queries and keys of one rank's whole sequence (self-attention), heads, kv heads, head dim.
struct AttentionShape {
  int64_t tokens;
  int heads, kv_heads, head_dim;
};

struct AttentionBenchOptions {
  int warmup = 5;
  int iterations = 20;
  uint64_t seed = 1;
  std::string csv_path;
  std::vector<AttentionShape> shapes;  // empty: the defaults (Llama-style GQA and MHA at 4k-16k tokens)
};

// Returns the number of runs whose sampled rows did not match the host reference.
int run_attention_bench(const AttentionBenchOptions& options);

}  // namespace weft::cli
