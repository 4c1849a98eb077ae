#include "attention_check.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "weft/cuda/check.hpp"
#include "weft/kernels/elementwise.hpp"

namespace weft::bench {
namespace {

float bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

std::vector<uint16_t> to_host(const void* device, int64_t count) {
  std::vector<uint16_t> host(static_cast<size_t>(count));
  WEFT_CUDA_CHECK(cudaMemcpy(host.data(), device, static_cast<size_t>(count) * 2, cudaMemcpyDeviceToHost));
  return host;
}

size_t bytes_of(const AttentionCheckShape& s, int heads, int element_bytes) {
  return static_cast<size_t>(s.tokens * heads * (element_bytes == 4 ? 1 : s.head_dim)) * static_cast<size_t>(element_bytes);
}

std::vector<AttentionKvTile> one_piece_tiles(const AttentionCheckShape& s) {
  const int64_t tile_kv = attention_tiling(s.head_dim).tile_kv;
  std::vector<AttentionKvTile> tiles;
  for (int64_t row = 0; row < s.tokens; row += tile_kv) {
    AttentionKvTile t;
    t.row = row;
    t.rows = std::min(tile_kv, s.tokens - row);
    tiles.push_back(t);
  }
  return tiles;
}

}  // namespace

SelfAttentionRun::SelfAttentionRun(const AttentionCheckShape& s, uint64_t seed, cudaStream_t stream)
    : shape(s),
      q(bytes_of(s, s.heads, 2)),
      k(bytes_of(s, s.kv_heads, 2)),
      v(bytes_of(s, s.kv_heads, 2)),
      o(bytes_of(s, s.heads, 2)),
      lse(bytes_of(s, s.heads, 4)),
      tiles(one_piece_tiles(s)),
      table(tiles.size() * sizeof(AttentionKvTile)) {
  const int64_t qc = int64_t{s.heads} * s.head_dim, kc = int64_t{s.kv_heads} * s.head_dim;
  fill_random_bf16(q.data, s.tokens * qc, seed, stream);
  fill_random_bf16(k.data, s.tokens * kc, seed + 1, stream);
  fill_random_bf16(v.data, s.tokens * kc, seed + 2, stream);
  poison_output(stream);
  WEFT_CUDA_CHECK(cudaMemcpy(table.data, tiles.data(), tiles.size() * sizeof(AttentionKvTile), cudaMemcpyHostToDevice));
  launch.q = q.data;
  launch.k = k.data;
  launch.v = v.data;
  launch.o = o.data;
  launch.lse = static_cast<float*>(lse.data);
  launch.ldq = launch.ldo = qc;
  launch.ldk = launch.ldv = kc;
  launch.ldlse = s.heads;
  launch.q_rows = launch.kv_rows = s.tokens;
  launch.heads = s.heads;
  launch.kv_heads = s.kv_heads;
  launch.head_dim = s.head_dim;
  launch.causal = s.causal;
  launch.kv_tiles = static_cast<const AttentionKvTile*>(table.data);
  launch.kv_tile_count = static_cast<int>(tiles.size());
  require_valid_kv_tiles(launch, tiles);
}

void SelfAttentionRun::poison_output(cudaStream_t stream) const {
  fill_u16(o.data, shape.tokens * shape.heads * shape.head_dim, kBf16Nan, stream);
}

double attention_sampled_error(const AttentionCheckShape& s, const void* q, const void* k, const void* v, const void* o,
                               const std::vector<std::pair<int64_t, int>>& samples) {
  const int64_t T = s.tokens, d = s.head_dim, qc = int64_t{s.heads} * d, kc = int64_t{s.kv_heads} * d;
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    throw std::invalid_argument("attention_sampled_error: heads " + std::to_string(s.heads) + " is not a multiple of kv_heads " + std::to_string(s.kv_heads));
  for (const auto& [i, h] : samples)
    if (i < 0 || i >= T || h < 0 || h >= s.heads)
      throw std::invalid_argument("attention_sampled_error: sample (row " + std::to_string(i) + ", head " + std::to_string(h) + ") outside " +
                                  std::to_string(T) + " rows and " + std::to_string(s.heads) + " heads");
  const std::vector<uint16_t> hq = to_host(q, T * qc), hk = to_host(k, T * kc), hv = to_host(v, T * kc), ho = to_host(o, T * qc);
  auto at = [](const std::vector<uint16_t>& m, int64_t index) { return static_cast<double>(bf16_value(m[static_cast<size_t>(index)])); };
  double worst = 0;
  std::vector<double> p(static_cast<size_t>(T));
  for (const auto& [i, h] : samples) {
    const int g = h / (s.heads / s.kv_heads);
    const int64_t keys = s.causal ? i + 1 : T;
    double top = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t x = 0; x < d; ++x) dot += at(hq, i * qc + h * d + x) * at(hk, j * kc + g * d + x);
      p[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
      top = std::max(top, p[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (int64_t j = 0; j < keys; ++j) sum += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - top));
    for (int64_t x = 0; x < d; ++x) {
      double want = 0, scale = 0;
      for (int64_t j = 0; j < keys; ++j) {
        const double value = at(hv, j * kc + g * d + x);
        want += p[static_cast<size_t>(j)] / sum * value;
        scale += p[static_cast<size_t>(j)] / sum * std::fabs(value);
      }
      const double got = at(ho, i * qc + h * d + x);
      if (!std::isfinite(got)) return NAN;
      worst = std::max(worst, std::fabs(got - want) / (scale + 1e-12));
    }
  }
  return worst;
}

}  // namespace weft::bench
