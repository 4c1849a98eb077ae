// Host side of the overlap GEMM: the compiled configurations, the rule that picks one, the checks
// that turn a bad launch into an error message instead of a fault, and the dispatch.
#include "weft/kernels/overlap_gemm.hpp"

#include <cstdint>
#include <algorithm>
#include <stdexcept>

#include "overlap_gemm_launchers.hpp"

namespace weft {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument("overlap GEMM: " + what); }

}  // namespace

OverlapGemmShape shape_of(OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_128x128: return {128, 128, 64};
    case OverlapGemmConfig::tile_128x256: return {128, 256, 64};
  }
  reject("unknown configuration");
}

std::string to_string(OverlapGemmConfig config) {
  const OverlapGemmShape s = shape_of(config);
  return std::to_string(s.tile_m) + "x" + std::to_string(s.tile_n) + "x" + std::to_string(s.tile_k);
}

std::vector<OverlapGemmConfig> overlap_gemm_configs() { return {OverlapGemmConfig::tile_128x128, OverlapGemmConfig::tile_128x256}; }

OverlapGemmConfig choose_overlap_gemm_config(int64_t m, int64_t n, int64_t /*k*/, int sm_count) {
  // A persistent kernel's time is about (waves) x (time of one tile); a 128x128 tile computes half
  // of a 128x256 one at a lower rate (it loads more bytes per FLOP into shared memory). The rate
  // ratio is an estimate until the tuner measures it per machine; `weft bench gemm` reports how
  // often this rule picks the faster tile.
  constexpr double kNarrowTileRate = 0.88;
  auto cost = [&](OverlapGemmConfig config) {
    const OverlapGemmShape s = shape_of(config);
    const int64_t waves = ceil_div(ceil_div(m, s.tile_m) * ceil_div(n, s.tile_n), std::max(sm_count, 1));
    const double rate = config == OverlapGemmConfig::tile_128x128 ? kNarrowTileRate : 1.0;
    return static_cast<double>(waves) * s.tile_m * s.tile_n / rate;
  };
  return cost(OverlapGemmConfig::tile_128x256) <= cost(OverlapGemmConfig::tile_128x128) ? OverlapGemmConfig::tile_128x256
                                                                                         : OverlapGemmConfig::tile_128x128;
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
  }
}

namespace {

std::unique_ptr<OverlapGemm::Prepared> prepare(const OverlapGemmLaunch& launch, OverlapGemmConfig config) {
  switch (config) {
    case OverlapGemmConfig::tile_128x128: return overlap_gemm_detail::prepare_128x128(launch);
    case OverlapGemmConfig::tile_128x256: return overlap_gemm_detail::prepare_128x256(launch);
  }
  reject("unknown configuration");
}

}  // namespace

OverlapGemm::OverlapGemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config)
    : config_(config), prepared_(prepare(launch, config)) {}
OverlapGemm::~OverlapGemm() = default;
OverlapGemm::OverlapGemm(OverlapGemm&&) noexcept = default;
OverlapGemm& OverlapGemm::operator=(OverlapGemm&&) noexcept = default;

void OverlapGemm::launch(cudaStream_t stream, uint64_t epoch) { prepared_->launch(stream, epoch); }

void launch_overlap_gemm(const OverlapGemmLaunch& launch, OverlapGemmConfig config, cudaStream_t stream) {
  OverlapGemm(launch, config).launch(stream, launch.epoch);
}

}  // namespace weft
