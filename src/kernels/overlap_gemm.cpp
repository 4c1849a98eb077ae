// Host side of the overlap GEMM: the compiled configurations, the rule that picks one, the checks
// that turn a bad launch into an error message instead of a fault, and the dispatch.
#include "weft/kernels/overlap_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "weft/runtime/cuda_check.hpp"

#include "overlap_gemm_launchers.hpp"

namespace weft {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument("overlap GEMM: " + what); }

}  // namespace

OverlapGemmShape shape_of(OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_128x96: return {128, 96, 64};
    case OverlapGemmConfig::tile_128x128: return {128, 128, 64};
    case OverlapGemmConfig::tile_128x192: return {128, 192, 64};
    case OverlapGemmConfig::tile_128x256: return {128, 256, 64};
  }
  reject("unknown configuration");
}

std::string to_string(OverlapGemmConfig config) {
  const OverlapGemmShape s = shape_of(config);
  return std::to_string(s.tile_m) + "x" + std::to_string(s.tile_n) + "x" + std::to_string(s.tile_k);
}

std::vector<OverlapGemmConfig> overlap_gemm_configs() {
  return {OverlapGemmConfig::tile_128x96, OverlapGemmConfig::tile_128x128, OverlapGemmConfig::tile_128x192,
          OverlapGemmConfig::tile_128x256};
}

namespace {

// Relative time of `count` entries of `config` split `splits` ways over `k` (see the header).
double estimated_time(int64_t count, int64_t k, OverlapGemmConfig config, int splits, int sm_count) {
  // Narrower tiles compute at a lower rate (more shared-memory bytes per FLOP); the ratios are
  // estimates until the tuner measures them per machine (H100: 128x128 ~0.85 of 128x256; 128x192
  // 0.98-0.99 on the MLP rows whose waves fill equally, `weft bench gemm`).
  auto rate_of = [](OverlapGemmConfig c) {
    switch (c) {
      case OverlapGemmConfig::tile_128x96: return 0.75;
      case OverlapGemmConfig::tile_128x128: return 0.88;
      case OverlapGemmConfig::tile_128x192: return 0.97;
      case OverlapGemmConfig::tile_128x256: return 1.0;
    }
    return 1.0;
  };
  // What a split costs beyond its share of K, in K-tiles of work: H100, m = 512, n = k = 12288,
  // 128x256: 2 splits (3 waves of 96 K-tiles) took 0.262 ms, no split (2 waves of 192) 0.262 ms,
  // so a split entry costs about 32 K-tiles more than its share (the partial tile's round trip
  // and the wait for the previous split; a model of 2 picked splits that gained nothing).
  constexpr double kFixupKTiles = 32.0;
  const OverlapGemmShape s = shape_of(config);
  const double k_tiles = static_cast<double>(ceil_div(k, s.tile_k));
  const int64_t waves = ceil_div(count * splits, std::max(sm_count, 1));
  const double per_entry = k_tiles / splits + (splits > 1 ? kFixupKTiles : 0.0);
  return static_cast<double>(waves) * per_entry * s.tile_m * s.tile_n / rate_of(config);
}

// Widest first: on equal estimates the wider tile (fewer shared-memory bytes per FLOP) wins.
constexpr OverlapGemmConfig widest_first[] = {OverlapGemmConfig::tile_128x256, OverlapGemmConfig::tile_128x192,
                                              OverlapGemmConfig::tile_128x128, OverlapGemmConfig::tile_128x96};

constexpr int kMaxKSplits = 8;
constexpr int kMinKTilesPerSplit = 4;

// A GEMM that cannot keep the tensor cores busy from HBM: FLOP per byte of A, B and C below
// Hopper's ~300 (989 TFLOP/s over 3.35 TB/s), with margin.
bool memory_bound(int64_t m, int64_t n, int64_t k) {
  constexpr double kComputeBoundFlopsPerByte = 250.0;
  const double dm = static_cast<double>(m), dn = static_cast<double>(n), dk = static_cast<double>(k);
  return 2.0 * dm * dn * dk / (2.0 * (dm * dk + dn * dk + dm * dn)) < kComputeBoundFlopsPerByte;
}

}  // namespace

int choose_k_splits(int64_t tile_count, int64_t m, int64_t n, int64_t k, OverlapGemmConfig config, int sm_count) {
  // A memory-bound GEMM gains nothing from more CTAs in flight, and each split adds a partial
  // tile's traffic. Measured on H100, m=64 n=k=12288: 8 splits 0.179 ms, none 0.135 ms.
  if (memory_bound(m, n, k)) return 1;
  const int64_t k_tiles = ceil_div(k, shape_of(config).tile_k);
  int best = 1;
  double best_time = estimated_time(tile_count, k, config, 1, sm_count);
  const double unsplit = best_time;
  for (int splits = 2; splits <= kMaxKSplits && k_tiles / splits >= kMinKTilesPerSplit; ++splits) {
    const double t = estimated_time(tile_count, k, config, splits, sm_count);
    if (t < best_time) {
      best = splits;
      best_time = t;
    }
  }
  return best_time < 0.95 * unsplit ? best : 1;
}

OverlapGemmTiling choose_overlap_gemm_tiling(int64_t m, int64_t n, int64_t k, int sm_count) {
  if (memory_bound(m, n, k)) {
    // Time follows the bytes the busiest SM streams: (waves) x (A rows + B rows of a tile). More,
    // narrower tiles put more SMs to pulling from HBM (m = 64, n = 12288 on 132 SMs: 128 tiles
    // of 96 columns rather than 96 of 128).
    OverlapGemmTiling best{OverlapGemmConfig::tile_128x256, 1};
    double best_bytes = INFINITY;
    for (OverlapGemmConfig config : widest_first) {
      const OverlapGemmShape s = shape_of(config);
      const int64_t waves = ceil_div(ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n), std::max(sm_count, 1));
      const double bytes = static_cast<double>(waves) * static_cast<double>(std::min<int64_t>(m, s.tile_m) + s.tile_n);
      if (bytes < best_bytes * 0.97) {  // a narrower tile only for a clear gain
        best = {config, 1};
        best_bytes = bytes;
      }
    }
    return best;
  }
  OverlapGemmTiling best{OverlapGemmConfig::tile_128x256, 1};
  double best_time = INFINITY;
  for (OverlapGemmConfig config : widest_first) {
    const OverlapGemmShape s = shape_of(config);
    const int64_t tiles = ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n);
    const int splits = choose_k_splits(tiles, m, n, k, config, sm_count);
    const double t = estimated_time(tiles, k, config, splits, sm_count);
    if (t < best_time) {
      best = {config, splits};
      best_time = t;
    }
  }
  return best;
}

std::vector<OverlapGemmTile> split_along_k(const std::vector<OverlapGemmTile>& table, int splits, int64_t k,
                                           OverlapGemmConfig config) {
  const int64_t k_tiles = ceil_div(k, shape_of(config).tile_k);
  if (splits < 1 || splits > k_tiles)
    reject("cannot split " + std::to_string(k_tiles) + " K-tiles " + std::to_string(splits) + " ways");
  std::vector<OverlapGemmTile> split;
  split.reserve(table.size() * static_cast<size_t>(splits));
  for (const OverlapGemmTile& entry : table) {
    if (entry.splits != 1) reject("split_along_k: the table is split already");
    for (int part = 0; part < splits; ++part) {
      OverlapGemmTile e = entry;
      e.k_begin = static_cast<int32_t>(k_tiles * part / splits);
      e.k_tiles = static_cast<int32_t>(k_tiles * (part + 1) / splits) - e.k_begin;
      e.split = part;
      e.splits = splits;
      if (part + 1 < splits) {
        e.notify_rank = -1;
        e.notify_increment = 0;
      }
      split.push_back(e);
    }
  }
  return split;
}

void require_launchable(const OverlapGemmLaunch& launch, OverlapGemmConfig config) {
  (void)shape_of(config);
  if (launch.m <= 0 || launch.n <= 0 || launch.k <= 0)
    reject("m, n, k must be positive (m=" + std::to_string(launch.m) + " n=" + std::to_string(launch.n) + " k=" +
           std::to_string(launch.k) + ")");
  if (launch.m > INT32_MAX || launch.n > INT32_MAX || launch.k > INT32_MAX) reject("m, n and k must fit in 32 bits");
  if (launch.k % 8 != 0)
    reject("k=" + std::to_string(launch.k) + " is not a multiple of 8: TMA needs 16-byte rows; pad K");
  struct Operand {
    const char* name;
    const void* pointer;
    int64_t stride;
  };
  for (const auto& [name, pointer, stride] : {Operand{"A", launch.a, launch.lda}, Operand{"B", launch.b, launch.ldb}}) {
    if (!pointer) reject(std::string(name) + " is null");
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0)
      reject(std::string(name) + " starts at an address that is not 16-byte aligned; TMA needs it (a region starting at an "
                                 "odd row or column of a buffer can cause this)");
    if (stride % 8 != 0 || stride < launch.k)
      reject(std::string(name) + "'s row stride " + std::to_string(stride) + " must be a multiple of 8 elements and >= k=" +
             std::to_string(launch.k));
  }
  if (launch.target_count < 1 || launch.target_count > kMaxStoreTargets)
    reject("target_count must be 1.." + std::to_string(kMaxStoreTargets) + ", is " + std::to_string(launch.target_count));
  for (int t = 0; t < launch.target_count; ++t)
    if (!launch.targets[t].data || launch.targets[t].stride < launch.targets[t].cols)
      reject("store target " + std::to_string(t) + " has no data or a row stride shorter than its rows");
  if (launch.tile_count < 0 || (launch.tile_count > 0 && !launch.tiles)) reject("tile table missing");
}

void require_valid_table(const OverlapGemmLaunch& launch, OverlapGemmConfig config, const std::vector<OverlapGemmTile>& table) {
  require_launchable(launch, config);
  const OverlapGemmShape s = shape_of(config);
  const int64_t tiles_m = ceil_div(launch.m, s.tile_m), tiles_n = ceil_div(launch.n, s.tile_n);
  for (size_t i = 0; i < table.size(); ++i) {
    const OverlapGemmTile& e = table[i];
    const std::string where = "tile table entry " + std::to_string(i) + " ";
    if (e.tile_m < 0 || e.tile_m >= tiles_m || e.tile_n < 0 || e.tile_n >= tiles_n)
      reject(where + "names tile (" + std::to_string(e.tile_m) + ", " + std::to_string(e.tile_n) + ") outside the " +
             std::to_string(tiles_m) + "x" + std::to_string(tiles_n) + " grid of " + to_string(config) + " tiles");
    const int64_t rows_there = std::min<int64_t>(s.tile_m, launch.m - int64_t{e.tile_m} * s.tile_m);
    const int64_t cols_there = std::min<int64_t>(s.tile_n, launch.n - int64_t{e.tile_n} * s.tile_n);
    if (e.rows <= 0 || e.rows > rows_there || e.cols <= 0 || e.cols > cols_there)
      reject(where + "stores " + std::to_string(e.rows) + "x" + std::to_string(e.cols) + " of a tile that has " +
             std::to_string(rows_there) + "x" + std::to_string(cols_there) + " elements");
    if (e.store_target < 0 || e.store_target >= launch.target_count) reject(where + "stores to a target that does not exist");
    const OverlapGemmTarget& target = launch.targets[e.store_target];
    if (e.store_row < 0 || e.store_col < 0 || e.store_row + e.rows > target.rows || e.store_col + e.cols > target.cols)
      reject(where + "stores outside its target (" + std::to_string(target.rows) + "x" + std::to_string(target.cols) + ")");
    if (e.wait_signal >= 0 && !launch.wait_signals) reject(where + "waits but no signal array was given");
    if (e.notify_rank >= 0 && (e.notify_rank >= kMaxSignalRanks || !launch.notify_signals[e.notify_rank]))
      reject(where + "notifies rank " + std::to_string(e.notify_rank) + " whose signal array was not given");
    if (e.notify_rank >= 0 && e.notify_increment == 0) reject(where + "notifies with increment 0");
    const int64_t k_tiles = ceil_div(launch.k, s.tile_k);
    if (e.k_begin < 0 || e.k_tiles < 0 || e.k_begin + e.k_tiles > k_tiles || (e.k_tiles == 0 && e.k_begin != 0))
      reject(where + "covers K-tiles [" + std::to_string(e.k_begin) + ", " + std::to_string(e.k_begin + e.k_tiles) + ") of " +
             std::to_string(k_tiles));
    if (e.splits < 1 || e.split < 0 || e.split >= e.splits || e.splits > launch.k_splits)
      reject(where + "is split " + std::to_string(e.split) + " of " + std::to_string(e.splits) + " (launch.k_splits is " +
             std::to_string(launch.k_splits) + ")");
    if (e.splits > 1) {
      // Split s waits for split s - 1 of the same tile: it must come earlier in the table, or a
      // CTA could wait for an entry that only it would run later.
      const bool follows = e.split == 0 || (i > 0 && table[i - 1].tile_m == e.tile_m && table[i - 1].tile_n == e.tile_n &&
                                             table[i - 1].split == e.split - 1 && table[i - 1].splits == e.splits &&
                                             table[i - 1].k_begin + table[i - 1].k_tiles == e.k_begin);
      if (!follows) reject(where + "is split " + std::to_string(e.split) + " but does not follow split " + std::to_string(e.split - 1) + " of its tile");
      if (e.k_tiles == 0 || (e.split + 1 == e.splits && e.k_begin + e.k_tiles != k_tiles) || (e.split == 0 && e.k_begin != 0))
        reject(where + "splits of a tile must cover K exactly once, in order");
      if (e.split + 1 < e.splits && e.notify_rank >= 0) reject(where + "notifies before its last split");
    }
  }
}

namespace {

std::unique_ptr<OverlapGemm::Prepared> prepare(const OverlapGemmLaunch& launch, OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_128x96: return overlap_gemm_detail::prepare_128x96(launch);
    case OverlapGemmConfig::tile_128x128: return overlap_gemm_detail::prepare_128x128(launch);
    case OverlapGemmConfig::tile_128x192: return overlap_gemm_detail::prepare_128x192(launch);
    case OverlapGemmConfig::tile_128x256: return overlap_gemm_detail::prepare_128x256(launch);
  }
  reject("unknown configuration");
}

}  // namespace

OverlapGemm::OverlapGemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config) : config_(config) {
  OverlapGemmLaunch prepared = launch;
  if (launch.k_splits > 1) {
    // One partial-sum tile and one counter per output tile; the counters start at zero and the
    // last split of each tile puts its counter back to zero.
    const OverlapGemmShape s = shape_of(config);
    const size_t tiles = static_cast<size_t>(ceil_div(launch.m, s.tile_m) * ceil_div(launch.n, s.tile_n));
    const size_t partial_bytes = tiles * static_cast<size_t>(s.tile_m * s.tile_n) * sizeof(float);
    WEFT_CUDA_CHECK(cudaMalloc(&split_memory_, partial_bytes + tiles * sizeof(uint32_t)));
    WEFT_CUDA_CHECK(cudaMemset(static_cast<char*>(split_memory_) + partial_bytes, 0, tiles * sizeof(uint32_t)));
    prepared.split_workspace = static_cast<float*>(split_memory_);
    prepared.split_counters = reinterpret_cast<uint32_t*>(static_cast<char*>(split_memory_) + partial_bytes);
  }
  prepared_ = prepare(prepared, config);
}
// Frees only when the launch split K (launch_overlap_gemm of a table without splits frees nothing,
// so it never waits for a kernel that waits for the caller).
OverlapGemm::~OverlapGemm() {
  if (split_memory_) cudaFree(split_memory_);
}
OverlapGemm::OverlapGemm(OverlapGemm&& other) noexcept
    : config_(other.config_), prepared_(std::move(other.prepared_)), split_memory_(std::exchange(other.split_memory_, nullptr)) {}
OverlapGemm& OverlapGemm::operator=(OverlapGemm&& other) noexcept {
  if (this != &other) {
    if (split_memory_) cudaFree(split_memory_);
    config_ = other.config_;
    prepared_ = std::move(other.prepared_);
    split_memory_ = std::exchange(other.split_memory_, nullptr);
  }
  return *this;
}

void OverlapGemm::launch(cudaStream_t stream, uint64_t epoch) { prepared_->launch(stream, epoch); }

void launch_overlap_gemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config, cudaStream_t stream) {
  OverlapGemm(launch, config).launch(stream, launch.epoch);
}

}  // namespace weft
