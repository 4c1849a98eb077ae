// The tiling rule: which of the overlap GEMM's compiled tiles, and which K split, a GEMM of a given
// shape runs with. The one place this is decided: make_plan (plan/strategies.hpp) asks it and writes
// the answer into the plan's GEMM steps (tile_m, tile_n, k_splits); the CUDA executor only obeys.
//
// The rule: the tile and K split with the smallest estimated time,
// (waves) x (K-tiles per entry + fix-up) x (tile work / tile rate), the tile rates those `weft tune
// --calibrate` measured on the GPU (MachineProfile::tile_rates) or built-in estimates, so that wave
// quantisation (5.3 waves of wide tiles vs 10.7 of narrow ones) and too few tiles for the SMs
// (m = 512: 192 tiles of 128x256 on 132 SMs are 1.45 waves, 256 of 128x192 are 1.94) are weighed. A split is only taken
// when it is estimated 5% faster. Stream-K (GemmStep::stream_k) over a 128x256 or 128x192 tile is
// taken where stream_k_time estimates it well ahead of the best whole-tile schedule (the margin for
// the L2 reuse it loses: src/model/tiling.cpp). Memory-bound GEMMs
// (FLOP per byte below Hopper's ridge) of more than 64 rows take a 128-row tile, unsplit or split along K into at most one wave, by the bytes the
// SMs stream (an SM streams only a share of HBM's rate, so most must pull at once); those of 129-256
// rows run in clusters instead where the caller allows them and they make one wave: the exchanged
// product on C's 112x128 tiles up to 224 rows, else 128x128 tiles (choose_memory_bound_clusters). GEMMs
// of at most 64 rows take 64-row tiles (half the MMA work of a 128-row tile): the widest, with the
// fewest K splits, that keeps enough bytes in flight to stream HBM at full rate.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weft {

struct TileShape {
  int tile_m = 128;
  int tile_n = 128;
  int tile_k = 64;
  bool operator==(const TileShape&) const = default;
};

// The tiles the overlap GEMM compiles (src/kernels/overlap_gemm_<M>x<N>.cu), 128-row ones widest
// first, then the 64-row ones; the kernel layer's config_for() throws, listing what it compiles,
// for a tile it does not compile.
const std::vector<TileShape>& overlap_gemm_tiles();

// "128x192" -> that tile's compute rate relative to 128x256, as `weft tune --calibrate` measured it
// on a GPU (MachineProfile::tile_rates); a tile missing from it takes the built-in estimate.
using TileRates = std::map<std::string, double>;
std::string tile_name(TileShape tile);  // "128x192"

struct GemmTiling {
  TileShape tile;
  int k_splits = 1;
  int tail_splits = 1;  // GemmStep::tail_splits
  bool stream_k = false;  // GemmStep::stream_k (k_splits and tail_splits are then 1)
  int cluster_m = 1, cluster_n = 1;  // GemmStep::cluster_m / cluster_n (the tiles in blocks of this many)
  // GemmStep::exchanged: the overlap GEMM computes C^T = B A^T; tile and clusters are C's (the
  // kernel's tile is tile.tile_n x tile.tile_m).
  bool exchanged = false;
  bool operator==(const GemmTiling&) const = default;
};

// stream_k_allowed false: the GEMM cannot run stream-K (it shares the GPU with NCCL, a companion or
// SM copies, and keeps its waves), so the pick is among whole-tile schedules only; a stream-K pick
// brings its own tile, which would be the wrong one without it.
// clusters_allowed: the GEMM may run in clusters and as the exchanged product (no tile waits, B
// stored [N, K], bf16, the GPU to itself: gpu_lowering's clustered_gemm_gap and exchanged_gemm_gap);
// the rule then takes them for memory-bound GEMMs of two tile rows (choose_memory_bound_clusters). No
// strategy's plan allows them yet (their GEMMs wait for tiles, or share the SMs with NCCL, a
// companion kernel or copies); `weft bench gemm` does for the plain GEMM it times.
GemmTiling choose_overlap_gemm_tiling(int64_t m, int64_t n, int64_t k, int sm_count, const TileRates& rates = {}, bool stream_k_allowed = true,
                                      bool clusters_allowed = false);
// Memory-bound GEMMs of 129-256 rows in clusters. Up to 224 rows, where C's two rows of 112x128
// tiles make at most one wave: the exchanged product on them, the two of a tile column sharing their
// B tile (C's clusters of 2x1), split along K by a wave estimate. Else 128x128 tiles, the two of a
// tile column sharing their B tile (cluster_m 2) and 1, 2 or 4 columns their A tile, split along K so
// that the entries fill most SMs in one wave; std::nullopt where they would not (then the
// unclustered rule decides).
std::optional<GemmTiling> choose_memory_bound_clusters(int64_t m, int64_t n, int64_t k, int sm_count);
// FP8 operands (e4m3): the overlap GEMM compiles its FP8 main loop for 128x128 and 64x128 tiles, 128
// deep in K, only (on 128x256 the main loop's partial sums would not fit in registers beside the
// accumulators): m <= 64 takes the 64-row tile, split as bf16's small-M rule splits; above, 128x128,
// and only the K split is chosen, as for bf16 on that tile: split where the tiles leave SMs idle, else
// a partial last wave split.
constexpr TileShape kFp8OverlapGemmTile{128, 128, 128};  // 128 e4m3 elements of K per stage (OverlapGemmConfig::tile_128x128x128_fp8)
constexpr TileShape kFp8SmallMTile{64, 128, 128};      // m <= 64 (a 128-row tile would do twice the MMA work)
GemmTiling choose_fp8_overlap_gemm_tiling(int64_t m, int64_t n, int64_t k, int sm_count, const TileRates& rates = {});
// FLOP per byte of A, B and C below Hopper's ridge, with margin: HBM, not the tensor cores, bounds it.
bool memory_bound_gemm(int64_t m, int64_t n, int64_t k);
// A tile's compute rate relative to 128x256 (narrower tiles move more shared-memory bytes per FLOP):
// the measured one in `rates`, else the built-in estimate.
double tile_rate(TileShape tile, const TileRates& rates = {});
// What a K split costs beyond its share of K, in K-tiles of work: H100, m = 512, n = k = 12288,
// 128x256: 2 splits (3 waves of 96 K-tiles) took 0.262 ms, no split (2 waves of 192) 0.262 ms, so
// a split entry costs about 32 K-tiles more than its share (the partial tile's round trip and the
// wait for the previous split).
constexpr double kSplitFixupKTiles = 32.0;
// The rule's estimate of `count` entries of `tile` split `splits` ways over `k` (relative units:
// waves x K-tiles per entry, with a split's fix-up, x tile area / tile rate).
double estimated_time(int64_t count, int64_t k, TileShape tile, int splits, int sm_count, const TileRates& rates = {});
// The K split for `tile_count` entries of one tile shape (a table may hold fewer tiles than the
// grid) of an m x n x k GEMM; 1 for memory-bound shapes.
int choose_k_splits(int64_t tile_count, int64_t m, int64_t n, int64_t k, TileShape tile, int sm_count, const TileRates& rates = {});

// The split of the tiles of a partial last wave (GemmStep::tail_splits) for `tile_count` unsplit
// entries: where the last wave holds at most half the SMs' worth of tiles, each is split as many
// ways (up to 4) as still fit in one wave, when the estimate gains 3%; else 1.
int choose_tail_splits(int64_t tile_count, int64_t k, TileShape tile, int sm_count);
// The estimated time, in the rule's units ((K-tiles per CTA) x (tile area) / (tile rate)), of
// `tile_count` unsplit entries with stream-K over their partial last wave and the whole wave before
// it (GemmStep::stream_k; INFINITY where it does not apply: whole waves, less than half a tile's K
// per CTA, or fewer than 8 K-tiles). It counts K-tiles only, not the L2 reuse stream-K can lose.
double stream_k_time(int64_t tile_count, int64_t k, TileShape tile, int sm_count, const TileRates& rates = {});

// TileLink's communication tile: rows moved (AG) or reduced (RS) per device-side signal, decoupled
// from the GEMM tile but a multiple of its height, so that a GEMM tile waits for (or completes)
// whole communication tiles. About a quarter of a rank's rows: enough tiles for the GEMM to start on
// the first while the next move, few enough that each transfer runs near link speed.
int64_t choose_comm_tile_rows(int64_t rows_per_rank, int tile_m);

}  // namespace weft
