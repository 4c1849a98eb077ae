// `signal` (FlashOverlap): one GEMM, its tiles counted per group of waves, each group's collective
// issued by a plain NCCL call as soon as the group is stored, then its tiles moved back in place.
//
// Layout (flashoverlap.txt Section 3.3): tiles are stored in execution order into C_grouped, a
// [rows, tile_n] buffer, so the tiles of one group are one contiguous block whatever the raster.
//   gemm_ar: tile-level. C_grouped rows [start, end) of group g are all-reduced in place, then its
//            tiles move to their place in C.
//   gemm_rs: each rank's result is a block of M/W rows. The paper splits tiles into W row slices so
//            that slice k goes to GPU k, which hands rank k the rows with row % W == k; our gemm_rs
//            promises contiguous blocks (like torch's reduce_scatter_tensor), so the unit is the tile
//            and the order interleaves the blocks instead: position p of every block's raster runs
//            next to each other, groups end on multiples of W, and group g's block in C_grouped is W
//            chunks (chunk k: the group's tiles of block k) — exactly what ncclReduceScatter splits.
//            Needs M/W to be a whole number of tile rows.
// Tiles narrower than tile_n (N not a multiple of it) would leave holes in C_grouped's rows; they go
// to C_edge, [rows, N % tile_n] in matrix row order, which gets one collective after the groups.
// NCCL's kernels need SMs while the GEMM runs (Algorithm 1, line 3): the GEMM is persistent on
// gemm_sms SMs (by default all but the machine profile's collective_sms), or launches a CTA per tile.
#include <algorithm>
#include <stdexcept>

#include "plan_builder_support.hpp"
#include "weft/core/wave_partition.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

struct OrderedTile {
  Rect tile;
  int block = 0;     // gemm_rs: the rank whose rows it holds
  bool edge = false; // narrower than tile_n: stored in C_edge
};

struct Cut {
  std::vector<OrderedTile> order;  // the tile table's order
  std::vector<int64_t> group_start;  // positions in `order`; plus order.size() at the end
  SignalLayout layout;
};

int64_t rows_per_block(const Problem& p) { return p.op == OpKind::gemm_rs ? p.m / p.world_size : p.m; }

std::vector<OrderedTile> tile_order(const Problem& p, const PlanOptions& o) {
  const int blocks = p.op == OpKind::gemm_rs ? p.world_size : 1;
  const int64_t block_rows = rows_per_block(p);
  if (p.op == OpKind::gemm_rs && block_rows % o.tile_m != 0)
    throw std::invalid_argument("signal: gemm_rs needs each rank's " + std::to_string(block_rows) + " rows (M/W) to be a multiple of the " +
                                std::to_string(o.tile_m) + "-row tile, so that every tile belongs to one rank; use another strategy for this shape");
  const TileGrid grid{block_rows, p.n, o.tile_m, o.tile_n};
  std::vector<OrderedTile> order;
  for (int64_t index : rasterized_order(grid, o.raster, o.swizzle))
    for (int block = 0; block < blocks; ++block) {
      OrderedTile t;
      t.tile = grid.tile(index);
      t.tile.row += block * block_rows;
      t.block = block;
      t.edge = t.tile.cols < o.tile_n;
      order.push_back(t);
    }
  return order;
}

int gemm_sms_of(const PlanOptions& o) {
  const int sms = o.gemm_sms > 0 ? o.gemm_sms : o.machine.sm_count - o.machine.collective_sms;
  if (sms < 1) throw std::invalid_argument("signal: the GEMM needs at least one SM (gemm_sms " + std::to_string(o.gemm_sms) + ")");
  return sms;
}

CollectiveKind collective_of(const Problem& p) {
  return p.op == OpKind::gemm_rs ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
}

Cut cut_into_groups(const Problem& p, const PlanOptions& o, double measured_gemm_seconds = 0) {
  if (p.op != OpKind::gemm_ar && p.op != OpKind::gemm_rs)
    throw std::invalid_argument("signal builds plans for gemm_ar and gemm_rs, not " + std::string(to_string(p.op)));
  Cut cut;
  cut.order = tile_order(p, o);
  const auto count = static_cast<int64_t>(cut.order.size());
  const int sms = gemm_sms_of(o);
  const int waves = static_cast<int>((count + sms - 1) / sms);
  const int bytes_per_element = dtype_bytes(p.output_dtype);

  // Cost model (Algorithm 1): a wave of tiles takes the time one SM needs for one tile; a group's
  // collective costs what the machine's curve says for its block of C_grouped.
  std::vector<double> bytes_before(static_cast<size_t>(count) + 1, 0.0);
  for (int64_t i = 0; i < count; ++i) {
    const OrderedTile& t = cut.order[static_cast<size_t>(i)];
    bytes_before[static_cast<size_t>(i) + 1] =
        bytes_before[static_cast<size_t>(i)] + (t.edge ? 0.0 : static_cast<double>(t.tile.rows) * o.tile_n * bytes_per_element);
  }
  const MachineProfile& machine = o.machine;
  const double tile_flops = 2.0 * o.tile_m * o.tile_n * static_cast<double>(p.k);
  WavePartitionModel model;
  model.waves = waves;
  // Operands mostly come from L2 (neighbouring tiles share them), so a wave is bound by the math.
  model.seconds_per_wave = measured_gemm_seconds > 0 ? measured_gemm_seconds / waves : tile_flops / (machine.peak_flops / machine.sm_count);
  const CollectiveKind kind = collective_of(p);
  model.comm_seconds = [&, kind](int first_wave, int wave_count) {
    const int64_t begin = std::min<int64_t>(int64_t{first_wave} * sms, count);
    const int64_t end = std::min<int64_t>(int64_t{first_wave + wave_count} * sms, count);
    return machine.overlapped_call_seconds +
           machine.collective_seconds(kind, p.world_size, bytes_before[static_cast<size_t>(end)] - bytes_before[static_cast<size_t>(begin)]);
  };
  std::vector<int> partition = o.wave_partition;
  if (partition.empty()) {
    partition = search_wave_partition(model);
  } else {
    check_wave_partition(partition, waves);
  }

  // Group ends at wave ends; gemm_rs rounds them up to whole rounds of W (one tile of every block).
  const int64_t unit = p.op == OpKind::gemm_rs ? p.world_size : 1;
  cut.group_start.push_back(0);
  int64_t wave_end = 0;
  for (int size : partition) {
    wave_end += size;
    int64_t end = std::min<int64_t>(wave_end * sms, count);
    end = std::min<int64_t>((end + unit - 1) / unit * unit, count);
    if (end > cut.group_start.back()) cut.group_start.push_back(end);
  }
  cut.layout.gemm_sms = sms;
  cut.layout.tiles = count;
  cut.layout.waves = waves;
  cut.layout.partition = partition;
  cut.layout.predicted_seconds = model.predict(partition);
  cut.layout.predicted_gemm_seconds = model.seconds_per_wave * waves;
  return cut;
}

}  // namespace

SignalLayout signal_layout(const Problem& p, const PlanOptions& o, double measured_gemm_seconds) {
  check_problem(p);
  return cut_into_groups(p, o, measured_gemm_seconds).layout;
}

Plan plan_signal(const Problem& p, const PlanOptions& o) {
  check_problem(p);
  const Cut cut = cut_into_groups(p, o);
  const int world = p.world_size;
  const bool rs = p.op == OpKind::gemm_rs;
  const int64_t block_rows = rows_per_block(p);
  const int64_t edge_cols = p.n % o.tile_n;
  const size_t groups = cut.group_start.size() - 1;

  // Where each main tile lands in C_grouped, and each group's block there (the same on every rank).
  std::vector<int64_t> slot_row(cut.order.size(), -1);
  std::vector<int64_t> group_row(groups + 1, 0), group_tiles(groups, 0);
  int64_t row = 0;
  for (size_t g = 0; g < groups; ++g) {
    group_row[g] = row;
    const auto begin = static_cast<size_t>(cut.group_start[g]), end = static_cast<size_t>(cut.group_start[g + 1]);
    for (int block = 0; block < (rs ? world : 1); ++block)
      for (size_t i = begin; i < end; ++i) {
        const OrderedTile& t = cut.order[i];
        if (t.edge) continue;
        if (rs && t.block != block) continue;
        slot_row[i] = row;
        row += t.tile.rows;
        ++group_tiles[g];
      }
  }
  group_row[groups] = row;
  const int64_t grouped_rows = row;
  int64_t edge_count = 0;
  for (const OrderedTile& t : cut.order) edge_count += t.edge;

  Plan plan;
  plan.strategy = "signal";
  plan.problem = p;
  for (int r = 0; r < world; ++r) {
    RankPlanBuilder b(r, 2);
    const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
    const BufferId w = b.buffer("B", BufferRole::input, p.n, p.k, p.input_dtype);
    const BufferId c = b.buffer("C", BufferRole::output, block_rows, p.n, p.output_dtype);
    const BufferId grouped = grouped_rows > 0 ? b.buffer("C_grouped", BufferRole::scratch, grouped_rows, o.tile_n, p.output_dtype) : -1;
    const BufferId received =
        rs && grouped_rows > 0 ? b.buffer("C_received", BufferRole::scratch, grouped_rows / world, o.tile_n, p.output_dtype) : -1;
    const BufferId edge = edge_count > 0 ? b.buffer("C_edge", BufferRole::scratch, p.m, edge_cols, p.output_dtype) : -1;
    const BufferId edge_received =
        rs && edge_count > 0 ? b.buffer("C_edge_received", BufferRole::scratch, block_rows, edge_cols, p.output_dtype) : -1;
    std::vector<SignalId> stored(groups, -1);
    for (size_t g = 0; g < groups; ++g)
      if (group_tiles[g] > 0) stored[g] = b.signal("group" + std::to_string(g) + "_stored");
    const SignalId edge_stored = edge_count > 0 ? b.signal("edge_tiles_stored") : -1;

    GemmStep gemm;
    gemm.a = b.whole(a);
    gemm.b = b.whole(w);
    gemm.tile_m = o.tile_m;
    gemm.tile_n = o.tile_n;
    // Persistent on gemm_sms SMs, the rest left to NCCL for the whole call; or one CTA per tile, and
    // NCCL's kernels (higher-priority stream) take SMs as tiles end. On 2xH200 the first was faster
    // (bench/results/README.md).
    gemm.persistent = !o.gemm_cta_per_tile;
    gemm.sm_limit = gemm.persistent ? cut.layout.gemm_sms : 0;
    size_t g = 0;
    for (size_t i = 0; i < cut.order.size(); ++i) {
      while (static_cast<int64_t>(i) >= cut.group_start[g + 1]) ++g;
      const OrderedTile& t = cut.order[i];
      GemmTile tile;
      tile.tile = t.tile;
      if (t.edge) {
        tile.store = Region{r, edge, Rect{t.tile.row, 0, t.tile.rows, t.tile.cols}};
        tile.notify = Notify{b.own(edge_stored), 1};
      } else {
        tile.store = Region{r, grouped, Rect{slot_row[i], 0, t.tile.rows, t.tile.cols}};
        tile.notify = Notify{b.own(stored[g]), 1};
      }
      gemm.tiles.push_back(tile);
    }
    b.add("gemm (tiles in execution order, counted per wave group)", 0, Engine::sm, gemm);

    int collective = 0;
    int64_t received_row = 0;
    for (size_t gi = 0; gi < groups; ++gi) {
      if (group_tiles[gi] == 0) continue;
      const std::string name = "group " + std::to_string(gi);
      const Region block = b.rows(grouped, group_row[gi], group_row[gi + 1] - group_row[gi]);
      MoveBoxesStep back;
      back.src = b.whole(rs ? received : grouped);
      back.dst = b.whole(c);
      if (rs) {
        const int64_t share = (group_row[gi + 1] - group_row[gi]) / world;
        Step& step = b.add("reduce_scatter " + name, 1, Engine::nccl,
                           CollectiveStep{CollectiveKind::reduce_scatter, collective++, block, b.rows(received, received_row, share), {}, {}});
        step.waits.push_back(Wait{b.own(stored[gi]), static_cast<uint64_t>(group_tiles[gi])});
        int64_t at = received_row;
        for (int64_t i = cut.group_start[gi]; i < cut.group_start[gi + 1]; ++i) {
          const OrderedTile& t = cut.order[static_cast<size_t>(i)];
          if (t.edge || t.block != r) continue;
          back.moves.push_back({Rect{at, 0, t.tile.rows, t.tile.cols}, Rect{t.tile.row - r * block_rows, t.tile.col, t.tile.rows, t.tile.cols}});
          at += t.tile.rows;
        }
        received_row += share;
      } else {
        Step& step = b.add("all_reduce " + name, 1, Engine::nccl, CollectiveStep{CollectiveKind::all_reduce, collective++, block, block, {}, {}});
        step.waits.push_back(Wait{b.own(stored[gi]), static_cast<uint64_t>(group_tiles[gi])});
        for (int64_t i = cut.group_start[gi]; i < cut.group_start[gi + 1]; ++i) {
          const OrderedTile& t = cut.order[static_cast<size_t>(i)];
          if (t.edge) continue;
          back.moves.push_back({Rect{slot_row[static_cast<size_t>(i)], 0, t.tile.rows, t.tile.cols}, t.tile});
        }
      }
      b.add("restore order of " + name, 1, Engine::sm, back);
    }
    if (edge_count > 0) {
      const Region whole_edge = b.whole(edge);
      const Region landed = rs ? b.whole(edge_received) : whole_edge;
      Step& step = b.add(std::string(rs ? "reduce_scatter" : "all_reduce") + " edge tiles", 1, Engine::nccl,
                         CollectiveStep{collective_of(p), collective++, whole_edge, landed, {}, {}});
      step.waits.push_back(Wait{b.own(edge_stored), static_cast<uint64_t>(edge_count)});
      MoveBoxesStep back;
      back.src = landed;
      back.dst = b.whole(c);
      back.moves.push_back({Rect{0, 0, block_rows, edge_cols}, Rect{0, p.n - edge_cols, block_rows, edge_cols}});
      b.add("place edge tiles", 1, Engine::sm, back);
    }
    b.set_output(b.whole(c));
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
