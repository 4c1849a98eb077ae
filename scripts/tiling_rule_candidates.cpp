// For scripts/tiling_rule_replay.py: reads "m n k" lines, prints for each 128-row tile the tiling
// rule's inputs (weft/model/tiling.hpp) on 132 SMs: the whole-tile schedule's K split, tail split
// and estimate, stream-K's estimate, and whether the shape is memory-bound; then the rule's pick,
// and its pick where the GEMM may run in clusters ("cluster ... 1 1 0" where that is the same; the
// last field 1 for the exchanged product, whose tile and clusters are C's).
#include <cstdint>
#include <cstdio>

#include "weft/model/tiling.hpp"

using namespace weft;

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int main() {
  const int sms = 132;
  long long m, n, k;
  while (std::scanf("%lld %lld %lld", &m, &n, &k) == 3) {
    for (const TileShape& s : overlap_gemm_tiles()) {
      if (s.tile_m != 128) continue;
      const int64_t tiles = ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n);
      const int splits = choose_k_splits(tiles, m, n, k, s, sms);
      const int tail = splits == 1 ? choose_tail_splits(tiles, k, s, sms) : 1;
      std::printf("tile %lld %lld %lld %s %d %d %.9g %.9g %d\n", m, n, k, tile_name(s).c_str(), splits, tail,
                  estimated_time(tiles, k, s, splits, sms), stream_k_time(tiles, k, s, sms), memory_bound_gemm(m, n, k) ? 1 : 0);
    }
    const GemmTiling t = choose_overlap_gemm_tiling(m, n, k, sms);
    std::printf("pick %lld %lld %lld %s %d %d %d\n", m, n, k, tile_name(t.tile).c_str(), t.k_splits, t.tail_splits, t.stream_k ? 1 : 0);
    const GemmTiling c = choose_overlap_gemm_tiling(m, n, k, sms, {}, true, /*clusters_allowed=*/true);
    std::printf("cluster %lld %lld %lld %s %d %d %d %d %d %d\n", m, n, k, tile_name(c.tile).c_str(), c.k_splits, c.tail_splits, c.stream_k ? 1 : 0,
                c.cluster_m, c.cluster_n, c.exchanged ? 1 : 0);
  }
}
