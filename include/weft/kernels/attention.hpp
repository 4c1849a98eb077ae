// weft's attention forward kernel for Hopper (the AttentionStep of ir/plan.hpp on the GPU): bf16 Q,
// K, V in, bf16 O and f32 log-sum-exp out, softmax(Q K^T / sqrt(d)) V per query row and head,
// causal by global token position or not, GQA (query head c reads key/value head c / (C / G)), head
// dim 64 or 128, any lengths (ragged last tiles masked). Layouts are the step's, token-major:
//   q, o : [q_rows, C * head_dim] (row strides ldq, ldo), head c in columns [c * d, (c + 1) * d)
//   k, v : [kv_rows, G * head_dim] (row strides ldk, ldv)
//   lse  : [q_rows, C] f32 (row stride ldlse), natural log
// The keys read are the KV tiles' rows (AttentionKvTile), in table order; a KV tile may wait, before
// its K and V are loaded, until a signal reaches a value (bounded, acquire; the overlapped plans'
// per-tile waits). With `merge` the result is combined into what o and lse hold, by their
// log-sum-exp (RingAttention's combine). A row that sees no key gets o = 0 and lse = -infinity.
//
//   AttentionLaunch launch{...};           // pointers, shapes, device KV tile table
//   require_launchable(launch);            // dims, alignment, head dim, table: clear errors
//   Attention attention(launch);           // once: TMA descriptors, kernel attributes
//   attention.launch(stream);              // per call
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/tile/wait_record.hpp"

namespace weft {

// Rows [row, row + rows) of k and v, read as one unit after its wait (wait_signal -1: none). Plain
// data, copied to the GPU once per plan.
struct AttentionKvTile {
  int64_t row = 0;
  int64_t rows = 0;
  int32_t wait_signal = -1;  // index into this rank's signal array
  int32_t pad = 0;
  uint64_t wait_value = 0;
};
static_assert(sizeof(AttentionKvTile) == 32, "the device table layout is part of the kernel's contract");

// The kernel's tile sizes and pipeline depth, as data: query rows per CTA tile (64-row consumer
// warp groups), keys per K/V pipeline stage, and the stages. One is compiled per head dim
// (attention_tiling); the kernel walks a KV tile in pieces of tile_kv rows.
struct AttentionTiling {
  int head_dim;
  int tile_q;
  int tile_kv;
  int stages;
};
// The compiled tiling for a head dim (64 or 128); throws std::invalid_argument for another.
AttentionTiling attention_tiling(int head_dim);
std::vector<int> attention_head_dims();

struct AttentionLaunch {
  const void* q = nullptr;  // bf16
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;        // bf16
  float* lse = nullptr;
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0, ldlse = 0;  // elements between row starts
  int64_t q_rows = 0;       // rows of q, o and lse
  int64_t kv_rows = 0;      // rows of k and v
  int heads = 0;            // C: query heads side by side in q's columns
  int kv_heads = 0;         // G: divides C
  int head_dim = 0;
  int64_t q_position = 0;   // global token position of q's first row
  int64_t kv_position = 0;  // of k's first row
  bool causal = false;
  bool merge = false;
  const AttentionKvTile* kv_tiles = nullptr;  // device memory, kv_tile_count entries
  int kv_tile_count = 0;
  const uint64_t* wait_signals = nullptr;     // this rank's signal array (device)
  WaitRecord* error = nullptr;                // device or mapped memory; may be null
  uint64_t wait_timeout_ns = 10'000'000'000ull;
  int max_ctas = 0;                           // 0: one per SM
};

// Throws std::invalid_argument naming the values: head dim compiled, heads a multiple of kv_heads,
// TMA's 16-byte aligned bases and row strides, the boxes' widths within their strides.
void require_launchable(const AttentionLaunch& launch);
// Host-side check of a KV tile table (rows inside k, positive heights, waits on valid signals).
void require_valid_kv_tiles(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles);

// Adjacent tiles (each starting where the one before ends) that wait for the same signal value, or
// for nothing, as one: the kernel cuts every tile into pieces of its own tile_kv rows, so a plan's
// KV tile height does not shorten the kernel's pieces, and its table walk reads one entry per
// arrival instead of one per tile. Reading the merged tile after its one wait is what each of its
// tiles did.
std::vector<AttentionKvTile> merge_adjacent_kv_tiles(const std::vector<AttentionKvTile>& tiles);

// The tiles a query tile computes: (query tile, KV piece) pairs the causal mask leaves, summed over
// query tiles and heads; FLOPs = 4 * tile_q * tile_kv * head_dim per pair (what a benchmark counts).
int64_t attention_tiles_computed(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles);
// The FLOPs of the attention itself, whatever the tiling: 4 * head_dim per (query row, visible key)
// pair, summed over the heads; a key is visible when a tile covers it and (causal) its position is
// not after the query's. What compares kernels of different tilings (the tiles count their padding).
double attention_exact_flops(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles);

class Attention {
 public:
  explicit Attention(const AttentionLaunch& launch);
  ~Attention();
  Attention(Attention&&) noexcept;
  Attention& operator=(Attention&&) noexcept;

  const AttentionLaunch& arguments() const { return launch_; }
  void launch(cudaStream_t stream);
  // Points the prepared launch at other buffers of the same shapes (TMA descriptors encoded again).
  void retarget(const void* q, const void* k, const void* v, void* o, float* lse);

  // One per compiled head dim (src/kernels/attention.cu).
  struct Prepared {
    virtual ~Prepared() = default;
    virtual void launch(cudaStream_t stream) = 0;
    virtual void update(const AttentionLaunch& launch) = 0;
  };

 private:
  AttentionLaunch launch_;
  std::unique_ptr<Prepared> prepared_;
};

// Prepares and launches once (tests, one-off runs).
void launch_attention(const AttentionLaunch& launch, cudaStream_t stream);

}  // namespace weft
