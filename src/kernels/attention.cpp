// The attention kernel's host side: the compiled tilings, the checks before a launch, and the
// prepared launch that dispatches to the kernel of the launch's head dim.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "attention_launchers.hpp"
#include "weft/kernels/attention.hpp"

namespace weft {

using attention_detail::kTilingD128;
using attention_detail::kTilingD64;

std::vector<int> attention_head_dims() { return {kTilingD64.head_dim, kTilingD128.head_dim}; }

AttentionTiling attention_tiling(int head_dim) {
  if (head_dim == kTilingD64.head_dim) return kTilingD64;
  if (head_dim == kTilingD128.head_dim) return kTilingD128;
  throw std::invalid_argument("attention kernel: head dim " + std::to_string(head_dim) + " is not compiled (compiled: 64, 128)");
}

namespace {

void reject(const std::string& why) { throw std::invalid_argument("attention kernel: " + why); }

// TMA reads a box whose base and row stride are 16-byte aligned.
void require_tma_operand(const char* name, const void* data, int64_t ld, int64_t width) {
  if (data == nullptr) reject(std::string(name) + " is null");
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0)
    reject(std::string(name) + " at " + std::to_string(reinterpret_cast<uintptr_t>(data)) +
           " is not 16-byte aligned (TMA; a box must start at a column that is a multiple of 8)");
  if (ld % 8 != 0) reject(std::string(name) + "'s row stride " + std::to_string(ld) + " is not a multiple of 8 elements (TMA needs 16 bytes)");
  if (ld < width) reject(std::string(name) + "'s row stride " + std::to_string(ld) + " is less than its width " + std::to_string(width));
}

}  // namespace

void require_launchable(const AttentionLaunch& l) {
  (void)attention_tiling(l.head_dim);
  if (l.heads < 1 || l.kv_heads < 1 || l.heads % l.kv_heads != 0)
    reject("query heads " + std::to_string(l.heads) + " must be a positive multiple of key/value heads " + std::to_string(l.kv_heads));
  if (l.q_rows < 0 || l.kv_rows < 0) reject("negative rows (q " + std::to_string(l.q_rows) + ", kv " + std::to_string(l.kv_rows) + ")");
  if (l.q_rows >= (int64_t{1} << 31) || l.kv_rows >= (int64_t{1} << 31))
    reject("more than 2^31 rows (q " + std::to_string(l.q_rows) + ", kv " + std::to_string(l.kv_rows) + "): TMA coordinates are 32-bit");
  const int64_t q_width = int64_t{l.heads} * l.head_dim, kv_width = int64_t{l.kv_heads} * l.head_dim;
  if (l.q_rows > 0) {
    require_tma_operand("q", l.q, l.ldq, q_width);
    if (l.o == nullptr) reject("o is null");
    if (reinterpret_cast<uintptr_t>(l.o) % 4 != 0 || l.ldo % 2 != 0 || l.ldo < q_width)
      reject("o (row stride " + std::to_string(l.ldo) + ") must be 4-byte aligned with an even row stride of at least " +
             std::to_string(q_width) + " (bf16 pairs are stored)");
    if (l.lse == nullptr || l.ldlse < l.heads)
      reject("lse is null or its row stride " + std::to_string(l.ldlse) + " is less than the heads " + std::to_string(l.heads));
  }
  if (l.q_rows > 0) {
    // TMA descriptors are made for k and v whether or not a KV tile reads them.
    if (l.kv_rows < 1) reject("k and v have no rows");
    require_tma_operand("k", l.k, l.ldk, kv_width);
    require_tma_operand("v", l.v, l.ldv, kv_width);
  }
  if (l.kv_tile_count > 0 && l.kv_tiles == nullptr) reject("the KV tile table is null");
  if (l.kv_tile_count < 0 || l.max_ctas < 0) reject("negative KV tile count or CTA limit");
}

void require_valid_kv_tiles(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles) {
  if (static_cast<int64_t>(tiles.size()) != launch.kv_tile_count)
    reject("the table has " + std::to_string(tiles.size()) + " KV tiles, the launch says " + std::to_string(launch.kv_tile_count));
  for (size_t i = 0; i < tiles.size(); ++i) {
    const AttentionKvTile& t = tiles[i];
    if (t.rows < 1 || t.row < 0 || t.row + t.rows > launch.kv_rows)
      reject("KV tile " + std::to_string(i) + " (rows [" + std::to_string(t.row) + ", " + std::to_string(t.row + t.rows) +
             ")) is empty or outside k's " + std::to_string(launch.kv_rows) + " rows");
    if (t.wait_signal >= 0 && launch.wait_signals == nullptr) reject("KV tile " + std::to_string(i) + " waits, but the launch has no signals");
  }
}

std::vector<AttentionKvTile> merge_adjacent_kv_tiles(const std::vector<AttentionKvTile>& tiles) {
  std::vector<AttentionKvTile> merged;
  merged.reserve(tiles.size());
  for (const AttentionKvTile& t : tiles) {
    if (!merged.empty()) {
      AttentionKvTile& last = merged.back();
      const bool same_wait = last.wait_signal == t.wait_signal && (t.wait_signal < 0 || last.wait_value == t.wait_value);
      if (same_wait && last.row + last.rows == t.row) {
        last.rows += t.rows;
        continue;
      }
    }
    merged.push_back(t);
  }
  return merged;
}

int64_t attention_tiles_computed(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles) {
  const AttentionTiling tiling = attention_tiling(launch.head_dim);
  int64_t computed = 0;
  for (int64_t first = 0; first < launch.q_rows; first += tiling.tile_q) {
    const int64_t last_position = launch.q_position + std::min<int64_t>(first + tiling.tile_q, launch.q_rows) - 1;
    for (const AttentionKvTile& t : tiles)
      for (int64_t row = t.row; row < t.row + t.rows; row += tiling.tile_kv)
        if (!launch.causal || launch.kv_position + row <= last_position) ++computed;  // as the kernel skips
  }
  return computed * launch.heads;
}

double attention_exact_flops(const AttentionLaunch& launch, const std::vector<AttentionKvTile>& tiles) {
  double pairs = 0;
  for (const AttentionKvTile& t : tiles) {
    if (!launch.causal) {
      pairs += static_cast<double>(launch.q_rows) * static_cast<double>(t.rows);
      continue;
    }
    // Query row i sees the tile's keys at positions up to q_position + i: min(rows, max(0, that - first + 1)).
    const int64_t first = launch.kv_position + t.row;
    for (int64_t i = 0; i < launch.q_rows; ++i)
      pairs += static_cast<double>(std::clamp<int64_t>(launch.q_position + i - first + 1, 0, t.rows));
  }
  return 4.0 * launch.head_dim * launch.heads * pairs;
}

namespace {

// No query rows: nothing to launch, and no TMA descriptor to make for empty boxes.
struct NothingToLaunch final : Attention::Prepared {
  void launch(cudaStream_t) override {}
  void update(const AttentionLaunch&) override {}
};

std::unique_ptr<Attention::Prepared> prepare(const AttentionLaunch& launch) {
  require_launchable(launch);
  if (launch.q_rows == 0) return std::make_unique<NothingToLaunch>();
  if (launch.head_dim == kTilingD64.head_dim) return attention_detail::prepare_d64(launch);
  return attention_detail::prepare_d128(launch);
}

}  // namespace

Attention::Attention(const AttentionLaunch& launch) : launch_(launch), prepared_(prepare(launch)) {}
Attention::~Attention() = default;
Attention::Attention(Attention&&) noexcept = default;
Attention& Attention::operator=(Attention&&) noexcept = default;

void Attention::launch(cudaStream_t stream) { prepared_->launch(stream); }

void Attention::retarget(const void* q, const void* k, const void* v, void* o, float* lse) {
  AttentionLaunch moved = launch_;
  moved.q = q;
  moved.k = k;
  moved.v = v;
  moved.o = o;
  moved.lse = lse;
  require_launchable(moved);
  prepared_->update(moved);
  launch_ = moved;
}

void launch_attention(const AttentionLaunch& launch, cudaStream_t stream) { Attention(launch).launch(stream); }

}  // namespace weft
