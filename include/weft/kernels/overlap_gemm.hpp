// The table-driven overlap GEMM, which every strategy that changes a GEMM's epilogue runs: a persistent,
// warp-specialized Hopper GEMM, C = A * B^T with A [M, K] row-major and B [N, K] either row-major
// (K-major, a linear layer's weight) or given as B^T [K, N] row-major (N-major: WGMMA reads bf16 B
// either way; OverlapGemmLaunch::b_n_major), bf16, fp32 accumulation, bf16 output, whose main loop
// is CUTLASS's TMA + WGMMA collective, untouched (instantiated for either B layout), and
// whose tile order, prologue and epilogue follow a per-tile table:
//   - tiles run in table order (CTA c takes entries c, c + grid, c + 2 grid, ...);
//   - an entry may wait, before its A/B loads, until a 64-bit signal reaches a value (acquire);
//   - it stores its tile at any row/column of any of up to kMaxStoreTargets targets (local C, a
//     peer's buffer, a remapped position);
//   - it may add to a signal, local or a peer's, once its stores are visible there (release);
//   - it may add boxes of a target (partial sums peers stored) to its tile before storing it; such
//     an entry makes its wait in its epilogue, after its MMAs, instead of before its loads;
//   - it may load its A rows from a second A operand (rows that are elsewhere, read in place).
// Waits are bounded: on timeout the kernel records which tile, signal and value it waited for in an
// WaitRecord and goes on, so nothing hangs; the CUDA executor reads the record and fails the
// call (DeviceWaitTimeout), since its numbers are wrong.
//
//   OverlapGemmLaunch launch{...};                   // pointers, shapes, device tile table
//   require_valid_table(launch, config, table);     // alignment, shape and table checks, clear errors
//   OverlapGemm gemm(launch, config);               // once per plan: TMA descriptors, kernel attributes
//   gemm.launch(stream);                            // per call
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/tile/wait_record.hpp"

namespace weft {

constexpr int kMaxStoreTargets = 16;  // buffers stored into or read as addends (one own C, peers' slots, own slots)
constexpr int kMaxSignalRanks = 8;

// One row of the device tile table. Plain data, 120 bytes, copied to the GPU once per plan.
//
// Split K: a tile may be computed by `splits` entries, each over k_tiles K-tiles from k_begin,
// listed in split order (split s at a later table index than split s - 1; split_along_k and
// stream_k_tail build them), their K ranges covering K once in any order. Split s > 0 waits for
// split s - 1's partial sums in the launch's workspace, adds them, and passes the sum on; only the
// last split stores the tile and notifies. The order makes the sum deterministic; that every wait is
// for an earlier entry keeps CTAs that walk the table forward from waiting on each other in a cycle.
struct OverlapGemmTile {
  int32_t tile_m = 0;          // tile coordinates in the GEMM's own output space, in tiles
  int32_t tile_n = 0;
  int32_t rows = 0;            // valid extent of this tile (ragged edges)
  int32_t cols = 0;
  int64_t store_row = 0;       // where the tile's first element lands in its target
  int64_t store_col = 0;
  int32_t store_target = 0;    // index into OverlapGemmLaunch::targets
  int32_t wait_signal = -1;    // index into this rank's signal array, -1: no wait
  uint64_t wait_value = 0;     // counters start each call at 0 (signal_set.hpp)
  int32_t notify_rank = -1;    // rank whose signal array is notified, -1: no notify
  int32_t notify_signal = 0;
  uint64_t notify_increment = 0;
  int32_t k_begin = 0;         // first K-tile (of tile_k elements) of this entry
  int32_t k_tiles = 0;         // K-tiles of this entry; 0: all of K
  int32_t split = 0;           // 0 .. splits - 1
  int32_t splits = 1;
  // Addends: addend_count boxes of the tile's size in target addend_target, the j-th at row
  // addend_row + j * addend_row_step, column addend_col, added (fp32) to the tile as rounded to
  // bf16 before it is stored. With addends the entry's wait is made in its epilogue (it orders the
  // addends, not A or B); a split entry reads them, and waits, in its last split only.
  int32_t addend_target = -1;
  int32_t addend_count = 0;
  int64_t addend_row = 0;
  int64_t addend_row_step = 0;
  int64_t addend_col = 0;
  // 1: the entry's A rows are tile row a_tile_m of the launch's second A operand (a2), read where
  // they are (fused ag_gemm's own shard), instead of its own tile row of a.
  int32_t a_operand = 0;
  int32_t a_tile_m = 0;
};
static_assert(sizeof(OverlapGemmTile) == 120, "the device table layout is part of the kernel's contract");

// OverlapGemmTile::k_tiles of an entry that does nothing (no wait, load, MMA, store or notify):
// stream-K's padding, so that every CTA takes as many entries of its part of the table.
constexpr int32_t kNoWorkKTiles = -1;

struct OverlapGemmTarget {
  void* data = nullptr;  // bf16
  int64_t stride = 0;    // elements between row starts
  int64_t rows = 0;      // bounds, checked on the host when the table is built
  int64_t cols = 0;
};

// WaitRecord::signal when the wait that gave up was a split waiting for the previous split
// of its tile (expected: that split's index).
constexpr int32_t kSplitFixupSignal = -2;
// WaitRecord::signal when the hand-off between the consumers and the notifying warp gave up
// (the notifier waiting for a tile to be stored, or the consumers for a free slot; expected: the
// number of the CTA's notifying tile waited for, counted from 1).
constexpr int32_t kNotifyHandoffSignal = -3;
// WaitRecord::signal when the hand-off of a staged tile between the consumers and the storing warps
// gave up (the storers waiting for a tile to be staged, or the consumers for the buffer to be free;
// expected: the number of the CTA's stored tile waited for, counted from 1).
constexpr int32_t kStoreHandoffSignal = -4;


struct OverlapGemmLaunch {
  const void* a = nullptr;  // [m, k] bf16, row stride lda
  int64_t lda = 0;
  // B [n, k] bf16. K-major (b_n_major false): row-major [n, k], rows ldb elements apart. N-major:
  // B^T row-major [k, n], rows of n elements ldb apart (the layout kn of ir/problem.hpp).
  const void* b = nullptr;
  int64_t ldb = 0;
  bool b_n_major = false;
  int64_t m = 0, n = 0, k = 0;
  // The exchanged product: a, b, m and n are the caller's B, A, n and m (so C^T = B A^T is computed,
  // the caller's m along the kernel's N), and each tile is stored transposed into C: an entry's
  // rows, cols, store_row and store_col are C's (rows along the kernel's N, up to its tile_n), its
  // tile_m and tile_n the kernel's grid. K-major operands, no second A operand; compiled for
  // 128x96, 128x112, 128x128 and 128x192 (small m: the m rows in one tile column, B read once;
  // 128x112 covers m = 129-224 in two tile columns, 12.5% less MMA work than two of 128 at m = 200).
  bool store_transposed = false;
  // Clusters of cluster_m x cluster_n CTAs that load each shared tile once from L2 and multicast it
  // (TMA): the table comes in groups of cluster_m * cluster_n consecutive entries, entry j of a group
  // at (j % cluster_m, j / cluster_m) in the cluster; the entries of one cluster column (same j /
  // cluster_m) share a tile column (B's tile), those of one cluster row (same j % cluster_m) a tile
  // row and A rows (A's tile). Every entry of a group covers the same K-tiles as the same split
  // (split_along_k with the group's size), does work and waits for nothing (a wait would hold the
  // peers' loads too), and the table is whole groups; require_valid_table checks it.
  // Compiled (compiled_in_cluster) for the K-major, untransposed product: 2x1 and 1x2 on 128x128 and
  // 128x256 tiles (bf16) and on FP8's 128x128x128; 2x2, 2x4 and 4x2 on bf16 128x128. For the
  // exchanged product (store_transposed), in the kernel's coordinates: 1x2, 2x2 and 4x2 on 128x112
  // (C's two row tiles of a tile column share the kernel's A tile, C's B rows).
  int cluster_m = 1, cluster_n = 1;
  // FP8 operands: a, a2 and b hold e4m3 elements (K-major, K a multiple of 16), accumulated in fp32
  // and scaled in the epilogue by their fp32 dequantization scales (ir/scaling.hpp) before C is
  // rounded to bf16: one scale per operand (a_scales[0], a2_scales[0], b_scales[0]), or with
  // row_scales one per row of A (a_scales[i] for row i of a, a2_scales for a2's rows) and one per
  // row of B ([N, K]: one per column of C). Compiled for 128x128 tiles, 128 deep in K
  // (OverlapGemmConfig::tile_128x128x128_fp8; 128x256's registers cannot hold the FP8 main loop's
  // partial sums beside the accumulators), untransposed, alone or in clusters of two; and for
  // 64x128x128 (tile_64x128), unclustered, for m <= 64.
  bool fp8 = false;
  bool row_scales = false;
  const float* a_scales = nullptr;
  const float* a2_scales = nullptr;
  const float* b_scales = nullptr;
  const void* a2 = nullptr;  // optional second A operand, [m2, k] bf16, row stride lda2 (entries with a_operand 1)
  int64_t lda2 = 0;
  int64_t m2 = 0;
  OverlapGemmTarget targets[kMaxStoreTargets];
  int target_count = 0;
  const OverlapGemmTile* tiles = nullptr;  // device memory, tile_count entries
  int tile_count = 0;
  const uint64_t* wait_signals = nullptr;             // this rank's signal array (device)
  uint64_t* notify_signals[kMaxSignalRanks] = {};     // every rank's signal array, as this GPU sees it
  WaitRecord* error = nullptr;                  // device or mapped memory; may be null
  uint64_t wait_timeout_ns = 10'000'000'000ull;
  int max_ctas = 0;                                   // 0: one per SM
  int k_splits = 1;                                   // the most splits of any entry; OverlapGemm sizes the workspace
  float* split_workspace = nullptr;                   // set by OverlapGemm: tile_m x tile_n floats per output tile
  uint32_t* split_counters = nullptr;                 // set by OverlapGemm: one per output tile, zero between calls
};

// Tile and cluster shapes compiled in. The plan's tile_m x tile_n must match the config's tile.
// tile_128x128x128_fp8 is FP8's alone (OverlapGemmLaunch::fp8): 128 e4m3 elements of K per stage are
// the 128 bytes a bf16 stage of 64 holds; it is not among overlap_gemm_configs() (the bf16 tiles).
// tile_64x128 (128 deep in K either way) runs bf16 or FP8 operands, FP8's tile for m <= 64.
// tile_128x112 is the exchanged product's (C's m = 129-224 in two 112-row tile columns); it runs
// untransposed too.
enum class OverlapGemmConfig { tile_64x64, tile_64x128, tile_64x192, tile_64x256, tile_128x96, tile_128x128, tile_128x192, tile_128x256, tile_128x128x128_fp8,
                               tile_128x112 };

struct OverlapGemmShape {
  int tile_m, tile_n, tile_k;
};
OverlapGemmShape shape_of(OverlapGemmConfig config);
std::string to_string(OverlapGemmConfig config);
std::vector<OverlapGemmConfig> overlap_gemm_configs();
// The configurations compiled for FP8 operands (OverlapGemmLaunch::fp8): 128x128x128 and 64x128x128.
std::vector<OverlapGemmConfig> fp8_overlap_gemm_configs();
// Whether a configuration is compiled in clusters (of two at least; OverlapGemmLaunch::cluster_m /
// cluster_n), and in clusters of cluster_m x cluster_n (the kernel's), for the exchanged product
// (store_transposed) or the untransposed one.
bool compiled_in_clusters(OverlapGemmConfig config);
bool compiled_in_cluster(OverlapGemmConfig config, int cluster_m, int cluster_n, bool exchanged = false);
// The cluster shapes compiled beyond 1x1 (2x1, 1x2, 2x2, 2x4, 4x2), for tools that time them all.
std::vector<std::pair<int, int>> compiled_cluster_shapes();
// The configuration of FP8 operands on a tile of the model (128x128 or 64x128; throws otherwise).
OverlapGemmConfig fp8_config_for(int tile_m, int tile_n);
// The configuration compiled for a tile shape of the model (model/tiling.hpp); throws
// std::invalid_argument listing the compiled ones when there is none.
OverlapGemmConfig config_for(int tile_m, int tile_n);
// Each entry becomes `splits` consecutive entries over K; waits stay on every split (each loads A
// and B), stores and notifies stay on the last; an entry with addends keeps them and its wait (an
// epilogue wait) on its last split only. With `group` > 1 the table is taken in groups of that many
// consecutive entries, each group becoming `splits` consecutive groups (split 0 of every entry of
// the group, then split 1, ...): a cluster's pairs stay pairs.
std::vector<OverlapGemmTile> split_along_k(const std::vector<OverlapGemmTile>& table, int splits, int64_t k,
                                           OverlapGemmConfig config, int group = 1);
// The entries after the table's last whole wave of `ctas` persistent CTAs split `splits` ways
// (split_along_k), where they still fit in one wave; the table unchanged otherwise. Each CTA then
// runs at most one entry of that last round, so a split never waits for an entry its own CTA has
// yet to run.
std::vector<OverlapGemmTile> split_tail_along_k(const std::vector<OverlapGemmTile>& table, int splits, int64_t k,
                                                OverlapGemmConfig config, int ctas);

// Stream-K (Osama et al., PPoPP 2023) for a table's partial last wave: the entries after the table's
// whole waves of `ctas` persistent CTAs, with the last whole wave where there is one (so that each
// CTA's share is at least a tile's K), are cut along K so that every CTA runs the same number of
// K-tiles of them (within one): CTA c's share is the c-th of `ctas` equal runs of the sequence
// (entry, K-tile), each piece of a tile one of its splits, taken from K-tile 0 on (whole tiles, the
// piece that starts a tile) and the piece that ends a tile last, so that the CTAs read K in two
// fronts, in step as whole tiles do (L2 reuse of A and B). A CTA's pieces go at table indices
// whole + j * ctas + c (its j-th piece), CTAs with fewer pieces padded with kNoWorkKTiles entries,
// and a tile's splits are numbered in table order: from the piece that starts its K to the one that
// ends it (its CTA's last), which stores and notifies. No piece waits for one that finishes after
// it: with free fix-ups every CTA finishes when its own share is done. Waits stay on every piece
// (each loads A and B); notifies on the last. The table unchanged where it has no partial wave,
// splits already, names a streamed tile twice, or has streamed tiles with addends (peers' partial
// sums: their epilogue wait is for other ranks, whose GEMMs may wait for stores this cut would put
// after it). Entries must be unsplit and cover all of K.
std::vector<OverlapGemmTile> stream_k_tail(const std::vector<OverlapGemmTile>& table, int64_t k, OverlapGemmConfig config, int ctas);
// The most splits of any entry (the launch's k_splits for such a table).
int most_splits(const std::vector<OverlapGemmTile>& table);

// Throws std::invalid_argument naming the problem: TMA needs 16-byte aligned A/B base pointers and
// row strides (B's rows: of k elements, or of n where B is N-major), K a multiple of 8, and every
// table entry inside the tile grid and its target.
void require_launchable(const OverlapGemmLaunch& launch, OverlapGemmConfig config);
// Host-side check of a table before it is copied to the device.
void require_valid_table(const OverlapGemmLaunch& launch, OverlapGemmConfig config, const std::vector<OverlapGemmTile>& table);

// A launch prepared once: the TMA descriptors are encoded, the kernel's shared-memory attribute set
// and the grid sized on the current device, so a call only enqueues the kernel.
class OverlapGemm {
 public:
  OverlapGemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config);
  ~OverlapGemm();
  OverlapGemm(OverlapGemm&&) noexcept;
  OverlapGemm& operator=(OverlapGemm&&) noexcept;

  OverlapGemmConfig config() const { return config_; }
  const OverlapGemmLaunch& arguments() const { return launch_; }
  // Enqueues one run.
  void launch(cudaStream_t stream);
  // Points the prepared launch at other operands and store targets of the same shapes (a caller's
  // buffers that moved between calls): the TMA descriptors are encoded again, nothing is allocated.
  // Throws like require_launchable when the new pointers are not usable.
  void retarget(const void* a, const void* b, const OverlapGemmTarget* targets, const void* a2 = nullptr);
  // Points an FP8 launch at other scales (a caller's, bound per call); a2_scales only where the
  // launch reads a second A operand. Throws like require_launchable when one is missing.
  void rescale(const float* a_scales, const float* b_scales, const float* a2_scales = nullptr);

  // One per compiled tile shape and B layout (src/kernels/overlap_gemm_<tile>.cu).
  struct Prepared {
    virtual ~Prepared() = default;
    virtual void launch(cudaStream_t stream) = 0;
    virtual void update(const OverlapGemmLaunch& launch) = 0;
  };

 private:
  OverlapGemmConfig config_;
  OverlapGemmLaunch launch_;  // as prepared, split workspace included
  std::unique_ptr<Prepared> prepared_;
  void* split_memory_ = nullptr;  // partial sums and counters when the launch splits K
};

// Prepares and launches once (tests, one-off runs): OverlapGemm(launch, config).launch(stream).
void launch_overlap_gemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config, cudaStream_t stream);

}  // namespace weft
