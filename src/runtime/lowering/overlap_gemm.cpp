// A GEMM step whose tile table has waits, notifies or remapped stores runs on the overlap GEMM:
// the table in the kernel's device format, its store targets and every rank's signal array. The K
// split is the plan's (GemmStep::k_splits, tail_splits and stream_k, decided by the model); waits stay on
// every split, the store and the notify happen once, after the last (with the addends and their
// wait, for a tile that has addends).
#include <algorithm>
#include <map>
#include <optional>

#include "lowering.hpp"
#include "weft/cuda/check.hpp"

namespace weft::lowering {

static_assert(kMaxGemmTileTargets <= kMaxStoreTargets, "every plan the structure check accepts must fit the overlap GEMM's targets");

Lowered lower_overlap_gemm(const GemmStep& gemm, const std::string& label, const Context& context) {
  auto reject = [&](const std::string& why) -> void { throw std::invalid_argument("overlap GEMM for step '" + label + "': " + why); };
  if (gemm.accumulate) reject("accumulating tile tables are not supported by the overlap GEMM yet");
  // The exchanged product: the kernel's tile is the plan's transposed, its A the plan's B.
  const bool exchanged = gemm.exchanged;
  const BoundRegion a = context.region(gemm.a), b = context.region(gemm.b);
  // FP8 operands have their own configuration (128 elements of K per stage).
  const bool fp8 = is_fp8(a.dtype);
  const OverlapGemmConfig config = fp8 ? fp8_config_for(gemm.tile_m, gemm.tile_n)
                                   : exchanged ? config_for(gemm.tile_n, gemm.tile_m) : config_for(gemm.tile_m, gemm.tile_n);
  const OverlapGemmShape shape = shape_of(config);
  const int64_t rows_per_tile = exchanged ? shape.tile_n : shape.tile_m, cols_per_tile = exchanged ? shape.tile_m : shape.tile_n;

  if (exchanged && b.column_major) reject("the exchanged product reads B as its A operand: B must be stored [N, K] (layout nk)");
  OverlapGemmLaunch launch;
  launch.a = (exchanged ? b : a).resolve().data;
  launch.lda = exchanged ? b.stride : a.stride;
  launch.b = (exchanged ? a : b).resolve().data;
  launch.ldb = exchanged ? a.stride : b.stride;
  launch.b_n_major = b.column_major;  // B in layout kn: its memory is B^T [K, N] row-major
  launch.m = exchanged ? b.rows : a.rows;
  launch.n = exchanged ? a.rows : b.rows;
  launch.k = a.cols;
  launch.store_transposed = exchanged;
  // The plan's clusters group C's tiles; the kernel's its own (exchanged: C's columns are its rows).
  launch.cluster_m = exchanged ? gemm.cluster_n : gemm.cluster_m;
  launch.cluster_n = exchanged ? gemm.cluster_m : gemm.cluster_n;
  launch.wait_signals = context.own_signals;
  launch.error = context.device_error;
  launch.wait_timeout_ns = context.device_wait_timeout_ns;
  launch.max_ctas = gemm.sm_limit;
  if (context.world_size > kMaxSignalRanks) reject("more than " + std::to_string(kMaxSignalRanks) + " ranks");
  for (int r = 0; r < context.world_size; ++r) launch.notify_signals[r] = context.signals_of(r);

  std::map<std::pair<int, int>, int> target_of;  // (rank, buffer) -> target index
  std::vector<BoundRegion> targets;
  std::vector<OverlapGemmTile> table;
  table.reserve(gemm.tiles.size());
  // The second A operand, where tiles read their A rows in place (one buffer at most).
  int a2_buffer = -1;
  int64_t a2_col = 0;
  BoundRegion a2;
  Region a2_region;
  // Each (rank, buffer) a tile stores into or reads addends from is one target of the launch.
  auto target_index = [&](const Region& region) {
    const auto key = std::make_pair(region.rank, region.buffer);
    auto it = target_of.find(key);
    if (it == target_of.end()) {
      if (launch.target_count == kMaxStoreTargets) reject("more than " + std::to_string(kMaxStoreTargets) + " store and addend targets");
      targets.push_back(context.whole(region.rank, region.buffer));
      const DeviceRegion whole = targets.back().resolve();
      launch.targets[launch.target_count] = OverlapGemmTarget{whole.data, whole.stride, whole.rows, whole.cols};
      it = target_of.emplace(key, launch.target_count++).first;
    }
    return it->second;
  };
  for (const GemmTile& t : gemm.tiles) {
    if (t.tile.row % rows_per_tile != 0 || t.tile.col % cols_per_tile != 0)
      reject("tile at (" + std::to_string(t.tile.row) + ", " + std::to_string(t.tile.col) + ") is not on the " + to_string(config) +
             (exchanged ? " grid (exchanged)" : " grid"));
    OverlapGemmTile e;
    if (t.a_rows && exchanged) reject("a tile of the exchanged product reads its A rows in place");
    if (t.a_rows) {
      // Rows read in place: a second A operand over the K columns of their buffer, whole rows of
      // tiles of it.
      if (t.a_rows->rank != context.rank) reject("a tile reads its A rows from another rank");
      if (a2_buffer < 0) {
        a2_buffer = t.a_rows->buffer;
        a2_col = t.a_rows->box.col;
        Region whole_rows = *t.a_rows;
        const BoundRegion buffer = context.whole(context.rank, t.a_rows->buffer);
        whole_rows.box = Rect{0, a2_col, buffer.rows, a.cols};
        a2 = context.region(whole_rows);
        a2_region = whole_rows;
      }
      if (t.a_rows->buffer != a2_buffer || t.a_rows->box.col != a2_col || t.a_rows->box.row % shape.tile_m != 0)
        reject("tiles read their A rows in place from more than one buffer, or at rows that are not on the " + to_string(config) + " grid");
      e.a_operand = 1;
      e.a_tile_m = static_cast<int32_t>(t.a_rows->box.row / shape.tile_m);
    }
    if (!t.addends.empty()) {
      // The kernel reads addends as equally spaced boxes of one target, in one column.
      const Region& first = t.addends.front();
      const int64_t step = t.addends.size() > 1 ? t.addends[1].box.row - first.box.row : 0;
      for (size_t j = 0; j < t.addends.size(); ++j) {
        const Region& addend = t.addends[j];
        if (addend.rank != first.rank || addend.buffer != first.buffer || addend.box.col != first.box.col ||
            addend.box.row != first.box.row + static_cast<int64_t>(j) * step || step < 0)
          reject("a tile's addends are not equally spaced rows of one buffer in one column, as the overlap GEMM reads them");
      }
      e.addend_target = target_index(first);
      e.addend_count = static_cast<int32_t>(t.addends.size());
      e.addend_row = first.box.row;
      e.addend_row_step = step;
      e.addend_col = first.box.col;
    }
    const int store_target = target_index(t.store);
    // The kernel's grid: C's row blocks along its N where the product is exchanged.
    e.tile_m = static_cast<int32_t>(exchanged ? t.tile.col / shape.tile_m : t.tile.row / shape.tile_m);
    e.tile_n = static_cast<int32_t>(exchanged ? t.tile.row / shape.tile_n : t.tile.col / shape.tile_n);
    e.rows = static_cast<int32_t>(t.store.box.rows);
    e.cols = static_cast<int32_t>(t.store.box.cols);
    e.store_row = t.store.box.row;
    e.store_col = t.store.box.col;
    e.store_target = store_target;
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
  if (a2_buffer >= 0) {
    launch.a2 = a2.resolve().data;
    launch.lda2 = a2.stride;
    launch.m2 = a2.rows;
  }
  // FP8 operands (gpu_lowering's gate admits e4m3 with tensor or row scales on 128x128 tiles): their
  // scales, applied in the epilogue; a caller's scales may move between calls, and the launch follows.
  const std::optional<BoundScales> a_scales = context.scales(gemm.a), b_scales = context.scales(gemm.b);
  std::optional<BoundScales> a2_scales;
  if (a_scales || b_scales) {
    if (!a_scales || !b_scales) reject("multiplies FP8 by a matrix that is not FP8");
    if (exchanged) reject("FP8 operands run the untransposed product only");
    const bool rows = is_row_scaled(a_scales->grid);
    if (a_scales->grid.block_cols != 0 || b_scales->grid.block_cols != 0 || rows != is_row_scaled(b_scales->grid))
      reject("FP8 scales other than one per operand or one per row; the overlap GEMM's epilogue applies tensor and row scales only");
    if (a2_buffer >= 0) {
      a2_scales = context.scales(a2_region);
      if (!a2_scales) reject("reads FP8 A rows in place from a buffer without scales");
    }
    launch.fp8 = true;
    launch.row_scales = rows;
    launch.a_scales = scales_from(*a_scales, label, "A");
    launch.b_scales = scales_from(*b_scales, label, "B");
    if (a2_scales) launch.a2_scales = scales_from(*a2_scales, label, "A's rows in place");
  }
  const auto scales_move = [](const std::optional<BoundScales>& s) { return s && (s->scale_base || s->elements.moves); };
  const bool rescales = scales_move(a_scales) || scales_move(b_scales) || scales_move(a2_scales);
  launch.k_splits = gemm.k_splits;
  // A cluster's groups split in step (their splits stay groups).
  if (launch.k_splits > 1) table = split_along_k(table, launch.k_splits, launch.k, config, launch.cluster_m * launch.cluster_n);
  // SMs left to peer copies: the GEMM runs on fewer CTAs than SMs, which a wave's split must know.
  const bool leaves_sms = context.peer_copies_on_sms && std::any_of(gemm.tiles.begin(), gemm.tiles.end(), [](const GemmTile& t) { return t.wait.has_value(); });
  if (gemm.k_splits == 1 && (gemm.tail_splits > 1 || gemm.stream_k) && gemm.persistent && gemm.sm_limit == 0) {
    // The partial last wave of the CTAs this GPU runs (one per SM), not of the model's SM count.
    int device = 0, sms = 0;
    WEFT_CUDA_CHECK(cudaGetDevice(&device));
    WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int ctas = leaves_sms ? leave_sms_for_peer_copies(sms) : sms;
    if (gemm.stream_k) table = stream_k_tail(table, launch.k, config, ctas);
    else table = split_tail_along_k(table, gemm.tail_splits, launch.k, config, ctas);
    launch.k_splits = most_splits(table);
  }
  launch.tile_count = static_cast<int>(table.size());
  if (!gemm.persistent) launch.max_ctas = launch.tile_count;
  if (leaves_sms) launch.max_ctas = leave_sms_for_peer_copies(launch.max_ctas);
  launch.tiles = table.data();  // checked on the host before anything is allocated; the device copy replaces it below
  require_valid_table(launch, config, table);
  std::shared_ptr<void> device_table = upload(table.data(), table.size() * sizeof(OverlapGemmTile));
  launch.tiles = static_cast<const OverlapGemmTile*>(device_table.get());
  auto prepared = std::make_shared<OverlapGemm>(launch, config);
  // A caller's operand or target may have moved since the last call: the launch follows it.
  const bool has_a2 = a2_buffer >= 0;
  const bool follows = a.moves || b.moves || (has_a2 && a2.moves) || std::any_of(targets.begin(), targets.end(), [](const BoundRegion& r) { return r.moves; });
  // The kernel's operands, in its order.
  const BoundRegion kernel_a = exchanged ? b : a, kernel_b = exchanged ? a : b;
  return {[prepared, device_table, a = kernel_a, b = kernel_b, a2, has_a2, targets, follows, a_scales, b_scales, a2_scales, rescales,
           label](cudaStream_t stream) {
            if (follows) {
              const OverlapGemmLaunch& now = prepared->arguments();
              OverlapGemmTarget moved[kMaxStoreTargets];
              const void* a2_now = has_a2 ? a2.resolve().data : nullptr;
              bool changed = now.a != a.resolve().data || now.b != b.resolve().data || now.a2 != a2_now;
              for (size_t t = 0; t < targets.size(); ++t) {
                const DeviceRegion whole = targets[t].resolve();
                moved[t] = OverlapGemmTarget{whole.data, whole.stride, whole.rows, whole.cols};
                changed = changed || moved[t].data != now.targets[t].data;
              }
              if (changed) prepared->retarget(a.resolve().data, b.resolve().data, moved, a2_now);
            }
            if (rescales) {
              const OverlapGemmLaunch& now = prepared->arguments();
              const float* a_now = scales_from(*a_scales, label, "A");
              const float* b_now = scales_from(*b_scales, label, "B");
              const float* a2_now = a2_scales ? scales_from(*a2_scales, label, "A's rows in place") : nullptr;
              if (a_now != now.a_scales || b_now != now.b_scales || a2_now != now.a2_scales) prepared->rescale(a_now, b_now, a2_now);
            }
            prepared->launch(stream);
          },
          {}};
}

}  // namespace weft::lowering
