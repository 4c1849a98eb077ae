#include "weft/model/tiling.hpp"

#include <algorithm>
#include <cmath>

namespace weft {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kMaxKSplits = 8;
constexpr int kMinKTilesPerSplit = 4;
constexpr int kSmallTileRows = 64;
constexpr int kMaxTailSplits = 4;
// What each split of a tail tile adds in K-tiles of work: the splits of a tile run side by side, so
// each waits little; it writes or reads one fp32 partial tile through L2. An estimate until measured.
constexpr double kTailFixupKTiles = 4.0;
// What stream-K's fix-up adds to a CTA's share, in K-tiles: its first piece's partial tile written
// and its last piece's read back, each through L2 (the pieces it reads finished long before). An
// estimate until measured.
constexpr double kStreamKFixupKTiles = 6.0;
// Stream-K is taken over a wide tile (128x256 or 128x192, widest first on a tie) where its estimate
// is at most this share of the best whole-tile schedule's: the estimate counts K-tiles, not the L2
// reuse stream-K loses (its CTAs leave the tiles' lockstep over K), which the margin stands for.
// Fitted to recorded sweeps by scripts/tiling_rule_replay.py (the figures: its commit message and
// bench/results/README.md).
constexpr double kStreamKTakenBelow = 0.86;

}  // namespace

double estimated_time(int64_t count, int64_t k, TileShape tile, int splits, int sm_count, const TileRates& rates) {
  const double k_tiles = static_cast<double>(ceil_div(k, tile.tile_k));
  const int64_t waves = ceil_div(count * splits, std::max(sm_count, 1));
  const double per_entry = k_tiles / splits + (splits > 1 ? kSplitFixupKTiles : 0.0);
  return static_cast<double>(waves) * per_entry * tile.tile_m * tile.tile_n / tile_rate(tile, rates);
}

// A GEMM that cannot keep the tensor cores busy from HBM: FLOP per byte of A, B and C below
// Hopper's ~300 (989 TFLOP/s over 3.35 TB/s), with margin.
bool memory_bound_gemm(int64_t m, int64_t n, int64_t k) {
  constexpr double kComputeBoundFlopsPerByte = 250.0;
  const double dm = static_cast<double>(m), dn = static_cast<double>(n), dk = static_cast<double>(k);
  return 2.0 * dm * dn * dk / (2.0 * (dm * dk + dn * dk + dm * dn)) < kComputeBoundFlopsPerByte;
}

std::string tile_name(TileShape tile) { return std::to_string(tile.tile_m) + "x" + std::to_string(tile.tile_n); }

// Narrower tiles compute at a lower rate (more shared-memory bytes per FLOP); where a machine profile
// has no measured rate, estimates (H100: 128x128 ~0.85 of 128x256; 128x192 0.98-0.99 on the MLP rows
// whose waves fill equally, `weft bench gemm`).
double tile_rate(TileShape tile, const TileRates& rates) {
  if (const auto it = rates.find(tile_name(tile)); it != rates.end()) return it->second;
  if (tile.tile_m == kSmallTileRows) return 0.6;  // one consumer warp group: half the MMA in flight
  switch (tile.tile_n) {
    case 96: return 0.75;
    case 128: return 0.88;
    case 192: return 0.97;
    default: return 1.0;
  }
}

// The rule's candidates, each height widest first.
const std::vector<TileShape>& overlap_gemm_tiles() {
  static const std::vector<TileShape> tiles = {{128, 256, 64}, {128, 192, 64}, {128, 128, 64}, {128, 96, 64},
                                               {64, 256, 64},  {64, 192, 128}, {64, 128, 128}, {64, 64, 128}};
  return tiles;
}

int choose_k_splits(int64_t tile_count, int64_t m, int64_t n, int64_t k, TileShape tile, int sm_count, const TileRates& rates) {
  // A memory-bound GEMM gains nothing from more CTAs in flight, and each split adds a partial
  // tile's traffic. Measured on H100, m=64 n=k=12288, 128x96 tiles: 8 splits 0.179 ms, none 0.135 ms
  // (m <= 64 has its own rule, choose_small_m_tiling).
  if (memory_bound_gemm(m, n, k)) return 1;
  const int64_t k_tiles = ceil_div(k, tile.tile_k);
  int best = 1;
  double best_time = estimated_time(tile_count, k, tile, 1, sm_count, rates);
  const double unsplit = best_time;
  for (int splits = 2; splits <= kMaxKSplits && k_tiles / splits >= kMinKTilesPerSplit; ++splits) {
    const double t = estimated_time(tile_count, k, tile, splits, sm_count, rates);
    if (t < best_time) {
      best = splits;
      best_time = t;
    }
  }
  return best_time < 0.95 * unsplit ? best : 1;
}

namespace {

// Few rows (m <= 64): 64-row tiles (a 128-row tile would do twice the MMA work). Time follows the
// bytes of B streamed from HBM, and a GEMM needs most SMs pulling at once: the narrowest 64-row tile
// whose tiles fit in one wave (a wider tile leaves SMs idle; more tiles than SMs add a second round),
// split in two along K where its tiles fill less than kSmallMSplitFill of the SMs (two, not more:
// each split re-reads A and adds a partial tile). Fitted to the H200 GEMM sweep's 29 shapes at m = 64
// with every tile and split timed (bench/results/2026-11-28j_h200x1gpu_gemm_sweep): the pick is the
// fastest or within one 1-us step of it on each.
constexpr double kSmallMSplitFill = 0.9;

// The small-M rule's K split of a 64-row tile's n / tile_n tiles: two where they fill less than
// kSmallMSplitFill of the SMs twice over and K leaves each split kMinKTilesPerSplit K-tiles, else one.
int small_m_splits(int64_t n, int64_t k, TileShape tile, int sm_count) {
  const bool few = 2.0 * static_cast<double>(ceil_div(n, tile.tile_n)) <= kSmallMSplitFill * std::max(sm_count, 1);
  return few && ceil_div(k, tile.tile_k) / 2 >= kMinKTilesPerSplit ? 2 : 1;
}

GemmTiling choose_small_m_tiling(int64_t n, int64_t k, int sm_count) {
  const int sms = std::max(sm_count, 1);
  const std::vector<TileShape>& tiles = overlap_gemm_tiles();
  // overlap_gemm_tiles() lists each height widest first: walk the 64-row tiles from the narrowest.
  GemmTiling pick{tiles.front(), 1};
  for (auto it = tiles.rbegin(); it != tiles.rend(); ++it) {
    if (it->tile_m != kSmallTileRows) continue;
    pick = {*it, 1};
    if (ceil_div(n, it->tile_n) <= sms) break;
  }
  pick.k_splits = small_m_splits(n, k, pick.tile, sms);
  return pick;
}

// Memory-bound GEMMs above 64 rows (m ~ 100-250 at the suites' widths): time follows the bytes of
// A and B that SMs stream, and one SM streams only a share of HBM's rate, so a GEMM needs most SMs
// pulling at once. Estimated in bytes per SM: the larger of (all bytes streamed) / (SMs) and (the
// busiest SM's bytes) / kSmStreamShare, plus kSplitFixupTiles fp32 partial tiles per split entry.
// Candidates: the 128-row tiles, unsplit or split along K into at most one wave (a split that adds a
// wave never pays). Fitted to `weft bench gemm --suite gemm_sweep` (bench/results/2026-11-25_h{1,2}00x1_
// gemm_sweep: every tile and split timed at m = 200, 29 shapes per GPU): the pick is 2.1% (H200) and
// 2.7% (H100) slower than the best on average, at most 15%; the bytes-per-SM rule it replaces, which
// took the narrowest tiles, 10.8% and 11.9%, at most 31%.
constexpr double kSmStreamShare = 1.25;   // an SM streams 1.25x its even share of HBM's rate
constexpr double kSplitFixupTiles = 8.0;  // a split entry's partial-sum round trip, in fp32 tiles streamed
constexpr int kMaxMemoryBoundSplits = 4;

GemmTiling choose_memory_bound_tiling(int64_t m, int64_t n, int64_t k, int sm_count) {
  const int sms = std::max(sm_count, 1);
  GemmTiling best{overlap_gemm_tiles().front(), 1};
  double best_bytes = INFINITY;
  for (const TileShape& s : overlap_gemm_tiles()) {  // widest first: on equal estimates the wider tile wins
    if (s.tile_m == kSmallTileRows) continue;
    const int64_t tiles = ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n);
    const int64_t k_tiles = ceil_div(k, s.tile_k);
    const double row_bytes = static_cast<double>(std::min<int64_t>(m, s.tile_m) + s.tile_n) * 2.0;  // A and B rows of a tile
    const double all_bytes = static_cast<double>(tiles) * row_bytes * static_cast<double>(k_tiles * s.tile_k);
    for (int splits = 1; splits <= kMaxMemoryBoundSplits; ++splits) {
      if (splits > 1 && (k_tiles / splits < kMinKTilesPerSplit || tiles * splits > sms)) continue;
      const double waves = static_cast<double>(ceil_div(tiles * splits, sms));
      const double entry_bytes = row_bytes * static_cast<double>(k_tiles * s.tile_k) / splits;
      double bytes = std::max(all_bytes / sms, waves * entry_bytes / kSmStreamShare);
      if (splits > 1) bytes += kSplitFixupTiles * s.tile_m * s.tile_n * 4.0 / kSmStreamShare;
      if (bytes < best_bytes) {
        best = {s, splits};
        best_bytes = bytes;
      }
    }
  }
  return best;
}

// Clusters for memory-bound GEMMs of two 128-row tile rows: the pair of a tile column loads its B
// tile once by TMA multicast (B is what such a GEMM streams), where the entries fill most SMs in
// one wave; fewer entries leave SMs idle and more pay a second wave. Clusters of 4 and 8 fit 120 of
// 132 SMs at once (cudaOccupancyMaxActiveClusters on H200: the grid the kernel gets), so more
// entries take pairs. A K split makes the entries where the tiles are few, keeping enough K-tiles
// per split. Fitted to recorded sweeps with every cluster and split timed at m = 200 by
// scripts/tiling_rule_replay.py --clusters (the figures: its commit message and bench/results/README.md).
constexpr double kClusterFillAtLeast = 0.8;           // entries / SMs
constexpr double kLargeClusterShare = 120.0 / 132.0;  // the SMs clusters of 4 and 8 occupy at once
constexpr int kMaxClusterSplits = 3;
constexpr int kMinKTilesPerClusterSplit = 16;

// Up to 224 rows, C's two rows of 112x128 tiles (the exchanged product: the kernel's 128x112, whose
// MMA covers 224 rows where two 128-row tiles cover 256) in pairs sharing their B tile: where the
// tiles make at most one wave, the K split s (at most 3, 16 K-tiles each at least) with the least
// waves(tiles * s) x K-tiles per entry, plus kExchangedSplitFixupKTiles for a split's partial sums.
// Fitted to one H200 sweep of every exchanged cluster and split at m = 200 (29 shapes; the figures:
// the commit message and bench/results/README.md): a split that adds a wave pays only where K is
// long (72 tiles: unsplit at 72 K-tiles, 3 ways at 144 and 288), and one within the wave where the
// split halves a long K (56 tiles at 56 K-tiles: 2 ways). From one and a half waves on (224-288
// tiles) they run unsplit in blocks of 2x2 (C's; pairs where the tile columns are odd), which
// measured faster than the whole-tile pick; between one wave and one and a half (144 tiles at
// n = 9216) 128x192 whole tiles measured faster, so the 128x128 rule below decides.
constexpr TileShape kExchangedClusterTile{112, 128, 64};  // C's tile
constexpr double kExchangedSplitFixupKTiles = 26.0;
constexpr double kExchangedManyWaves = 1.5;  // tiles / SMs from which they run in blocks of 2x2

std::optional<GemmTiling> choose_exchanged_clusters(int64_t m, int64_t n, int64_t k, int sm_count) {
  const TileShape t = kExchangedClusterTile;
  if (m <= t.tile_m || m > 2 * t.tile_m) return std::nullopt;
  const int64_t columns = ceil_div(n, t.tile_n), tiles = 2 * columns, k_tiles = ceil_div(k, t.tile_k);
  if (static_cast<double>(tiles) >= kExchangedManyWaves * sm_count) {
    GemmTiling pick{t, 1};
    pick.cluster_m = 2;
    pick.cluster_n = columns % 2 == 0 ? 2 : 1;
    pick.exchanged = true;
    return pick;
  }
  if (tiles > sm_count) return std::nullopt;
  GemmTiling pick{t, 1};
  double best = INFINITY;
  for (int splits = 1; splits <= kMaxClusterSplits; ++splits) {
    if (splits > 1 && k_tiles / splits < kMinKTilesPerClusterSplit) break;
    const double time = static_cast<double>(ceil_div(tiles * splits, sm_count) * ceil_div(k_tiles, splits)) +
                        (splits > 1 ? kExchangedSplitFixupKTiles : 0.0);
    if (time < best) {
      best = time;
      pick.k_splits = splits;
    }
  }
  pick.cluster_m = 2;
  pick.exchanged = true;
  return pick;
}

}  // namespace

std::optional<GemmTiling> choose_memory_bound_clusters(int64_t m, int64_t n, int64_t k, int sm_count) {
  constexpr TileShape kTile{128, 128, 64};
  if (m <= kTile.tile_m || m > 2 * kTile.tile_m || !memory_bound_gemm(m, n, k) || sm_count < 2) return std::nullopt;
  if (auto exchanged = choose_exchanged_clusters(m, n, k, sm_count)) return exchanged;
  const int64_t columns = ceil_div(n, kTile.tile_n), tiles = 2 * columns, k_tiles = ceil_div(k, kTile.tile_k);
  int splits = kMaxClusterSplits;
  while (splits > 1 && (tiles * splits > sm_count || k_tiles / splits < kMinKTilesPerClusterSplit)) --splits;
  const int64_t entries = tiles * splits;
  if (entries > sm_count || static_cast<double>(entries) < kClusterFillAtLeast * sm_count) return std::nullopt;
  const bool large_fit = static_cast<double>(entries) <= kLargeClusterShare * sm_count;
  const int cluster_n = large_fit && columns % 4 == 0 ? 4 : large_fit && columns % 2 == 0 ? 2 : 1;
  GemmTiling t{kTile, splits};
  t.cluster_m = 2;
  t.cluster_n = cluster_n;
  return t;
}

GemmTiling choose_overlap_gemm_tiling(int64_t m, int64_t n, int64_t k, int sm_count, const TileRates& rates, bool stream_k_allowed,
                                      bool clusters_allowed) {
  if (m <= kSmallTileRows) return choose_small_m_tiling(n, k, sm_count);
  // Widest first (overlap_gemm_tiles' order): on equal estimates the wider tile wins. 64-row tiles
  // are only for m <= 64: above, each would stream all of B once more per 64 rows.
  if (memory_bound_gemm(m, n, k)) {
    if (clusters_allowed)
      if (auto clustered = choose_memory_bound_clusters(m, n, k, sm_count)) return *clustered;
    return choose_memory_bound_tiling(m, n, k, sm_count);
  }
  GemmTiling best{overlap_gemm_tiles().front(), 1};
  double best_time = INFINITY;
  for (const TileShape& s : overlap_gemm_tiles()) {
    if (s.tile_m == kSmallTileRows) continue;
    const int64_t tiles = ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n);
    const int splits = choose_k_splits(tiles, m, n, k, s, sm_count, rates);
    const double t = estimated_time(tiles, k, s, splits, sm_count, rates);
    if (t < best_time) {
      best = {s, splits};
      best_time = t;
    }
  }
  // Stream-K over a wide tile where it is estimated well ahead (kStreamKTakenBelow): it replaces
  // the whole-tile schedule, splits and tail splits included.
  GemmTiling streamed{best.tile, 1, 1, true};
  double streamed_time = INFINITY;
  for (const TileShape& s : overlap_gemm_tiles()) {
    if (!stream_k_allowed || s.tile_m != 128 || (s.tile_n != 256 && s.tile_n != 192)) continue;
    const double t = stream_k_time(ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n), k, s, sm_count, rates);
    if (t < streamed_time) {
      streamed.tile = s;
      streamed_time = t;
    }
  }
  if (streamed_time <= kStreamKTakenBelow * best_time) return streamed;
  if (best.k_splits == 1)
    best.tail_splits = choose_tail_splits(ceil_div(m, best.tile.tile_m) * ceil_div(n, best.tile.tile_n), k, best.tile, sm_count);
  return best;
}

GemmTiling choose_fp8_overlap_gemm_tiling(int64_t m, int64_t n, int64_t k, int sm_count, const TileRates& rates) {
  if (m <= kSmallTileRows) {
    // bf16's small-M split on FP8's one 64-row tile.
    return GemmTiling{kFp8SmallMTile, small_m_splits(n, k, kFp8SmallMTile, sm_count)};
  }
  const TileShape tile = kFp8OverlapGemmTile;
  const int64_t tiles = ceil_div(m, tile.tile_m) * ceil_div(n, tile.tile_n);
  GemmTiling t{tile, choose_k_splits(tiles, m, n, k, tile, sm_count, rates)};
  if (t.k_splits == 1) t.tail_splits = choose_tail_splits(tiles, k, tile, sm_count);
  return t;
}

double stream_k_time(int64_t tile_count, int64_t k, TileShape tile, int sm_count, const TileRates& rates) {
  const int64_t ctas = std::max(sm_count, 1), k_tiles = ceil_div(k, tile.tile_k);
  if (ctas < 2 || tile_count % ctas == 0) return INFINITY;  // whole waves: nothing to balance
  const int64_t kept = std::max<int64_t>(tile_count / ctas - 1, 0) * ctas, streamed = tile_count - kept;
  // At least half a tile's K per CTA: shorter shares cut a tile into more pieces than the fix-up pays for.
  if (2 * streamed < ctas || k_tiles < 2 * kMinKTilesPerSplit) return INFINITY;
  const double k_tiles_per_cta = static_cast<double>(kept / ctas * k_tiles + ceil_div(streamed * k_tiles, ctas)) + kStreamKFixupKTiles;
  return k_tiles_per_cta * tile.tile_m * tile.tile_n / tile_rate(tile, rates);
}

int choose_tail_splits(int64_t tile_count, int64_t k, TileShape tile, int sm_count) {
  if (sm_count < 2 || tile_count <= sm_count) return 1;  // one wave: the K split's own rule decides
  const int64_t tail = tile_count % sm_count;
  if (tail == 0 || 2 * tail > sm_count) return 1;
  const int64_t k_tiles = ceil_div(k, tile.tile_k);
  const int splits = static_cast<int>(std::min<int64_t>({kMaxTailSplits, sm_count / tail, k_tiles / kMinKTilesPerSplit}));
  if (splits < 2) return 1;
  const double whole = static_cast<double>(tile_count / sm_count + 1) * static_cast<double>(k_tiles);
  const double split = static_cast<double>(tile_count / sm_count) * static_cast<double>(k_tiles) +
                       static_cast<double>(ceil_div(k_tiles, splits)) + (splits - 1) * kTailFixupKTiles;
  return split < 0.97 * whole ? splits : 1;
}

int64_t choose_comm_tile_rows(int64_t rows_per_rank, int tile_m) {
  if (rows_per_rank <= 0 || tile_m <= 0) return std::max<int64_t>(rows_per_rank, 1);
  const int64_t quarter = (rows_per_rank + 3) / 4;
  const int64_t rounded = (quarter + tile_m - 1) / tile_m * tile_m;
  return std::clamp<int64_t>(rounded, std::min<int64_t>(tile_m, rows_per_rank), rows_per_rank);
}

}  // namespace weft
