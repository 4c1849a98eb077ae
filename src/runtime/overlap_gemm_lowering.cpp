#include "overlap_gemm_lowering.hpp"

#include <map>
#include <stdexcept>

#include "weft/runtime/cuda_check.hpp"

namespace weft {

LoweredOverlapGemm lower_overlap_gemm(const GemmStep& gemm, const std::string& label, const OverlapGemmPlanContext& context) {
  auto reject = [&](const std::string& why) -> void {
    throw std::invalid_argument("overlap GEMM for step '" + label + "': " + why);
  };
  OverlapGemmConfig config{};
  bool found = false;
  for (OverlapGemmConfig candidate : overlap_gemm_configs()) {
    const OverlapGemmShape s = shape_of(candidate);
    if (s.tile_m == gemm.tile_m && s.tile_n == gemm.tile_n) {
      config = candidate;
      found = true;
    }
  }
  if (!found) {
    std::string compiled;
    for (OverlapGemmConfig candidate : overlap_gemm_configs()) compiled += " " + to_string(candidate);
    reject("the plan's tile " + std::to_string(gemm.tile_m) + "x" + std::to_string(gemm.tile_n) +
           " is not a compiled tile shape (compiled:" + compiled + ")");
  }
  if (gemm.accumulate) reject("accumulating tile tables are not supported by the overlap GEMM yet");
  const OverlapGemmShape shape = shape_of(config);

  OverlapGemmLaunch launch;
  const DeviceRegion a = context.region(gemm.a), b = context.region(gemm.b);
  launch.a = a.data;
  launch.lda = a.stride;
  launch.b = b.data;
  launch.ldb = b.stride;
  launch.m = a.rows;
  launch.n = b.rows;
  launch.k = a.cols;
  launch.wait_signals = context.own_signals;
  launch.raised_per_call = context.raised_per_call;
  launch.error = context.error;
  launch.max_ctas = gemm.sm_limit;
  for (int r = 0; r < context.world_size && r < kMaxSignalRanks; ++r) launch.notify_signals[r] = context.signals_of(r);

  std::map<std::pair<int, int>, int> target_of;  // (rank, buffer) -> target index
  std::vector<OverlapGemmTile> table;
  table.reserve(gemm.tiles.size());
  for (const GemmTile& t : gemm.tiles) {
    if (t.tile.row % shape.tile_m != 0 || t.tile.col % shape.tile_n != 0)
      reject("tile at (" + std::to_string(t.tile.row) + ", " + std::to_string(t.tile.col) + ") is not on the " +
             to_string(config) + " grid");
    const auto key = std::make_pair(t.store.rank, t.store.buffer);
    auto it = target_of.find(key);
    if (it == target_of.end()) {
      if (launch.target_count == kMaxStoreTargets) reject("more than " + std::to_string(kMaxStoreTargets) + " store targets");
      const DeviceRegion whole = context.whole(t.store.rank, t.store.buffer);
      launch.targets[launch.target_count] = OverlapGemmTarget{whole.data, whole.stride, whole.rows, whole.cols};
      it = target_of.emplace(key, launch.target_count++).first;
    }
    OverlapGemmTile e;
    e.tile_m = static_cast<int32_t>(t.tile.row / shape.tile_m);
    e.tile_n = static_cast<int32_t>(t.tile.col / shape.tile_n);
    e.rows = static_cast<int32_t>(t.store.box.rows);
    e.cols = static_cast<int32_t>(t.store.box.cols);
    e.store_row = t.store.box.row;
    e.store_col = t.store.box.col;
    e.store_target = it->second;
    if (t.wait) {
      if (t.wait->signal.rank != context.rank) reject("a tile waits on another rank's signal");
      e.wait_signal = t.wait->signal.id;
      e.wait_value = t.wait->value;
    }
    if (t.notify) {
      e.notify_rank = t.notify->signal.rank;
      e.notify_signal = t.notify->signal.id;
      e.notify_increment = t.notify->increment;
    }
    table.push_back(e);
  }
  // Split K where the table has too few tiles to fill the GPU (see choose_k_splits); invisible to
  // the plan: waits stay on every split, stores and notifies happen once, after the last.
  int device = 0, sm_count = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  // A plan that limits the GEMM's SMs has laid its tiles out in waves of that many (FlashOverlap's
  // wave groups); splitting would change what a wave holds, so it does not happen there.
  const bool may_split = context.allow_k_splits && gemm.sm_limit == 0 && gemm.persistent;
  launch.k_splits = may_split ? choose_k_splits(static_cast<int64_t>(table.size()), launch.m, launch.n, launch.k, config, sm_count) : 1;
  if (launch.k_splits > 1) table = split_along_k(table, launch.k_splits, launch.k, config);
  launch.tile_count = static_cast<int>(table.size());
  if (!gemm.persistent) launch.max_ctas = launch.tile_count;
  launch.tiles = table.data();  // checked on the host before anything is allocated; the device copy replaces it below
  require_valid_table(launch, config, table);
  LoweredOverlapGemm lowered;
  WEFT_CUDA_CHECK(cudaMalloc(&lowered.device_table, std::max<size_t>(table.size(), 1) * sizeof(OverlapGemmTile)));
  WEFT_CUDA_CHECK(cudaMemcpy(lowered.device_table, table.data(), table.size() * sizeof(OverlapGemmTile), cudaMemcpyHostToDevice));
  launch.tiles = lowered.device_table;
  lowered.gemm = std::make_unique<OverlapGemm>(launch, config);
  return lowered;
}

}  // namespace weft
