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
//            Where M/W is not a whole number of tile rows (GPT-3 RS m = 512 at world 8: 64 rows per
//            rank, a tile holds two ranks' rows), a tile cannot go to one chunk. Then tiles run down
//            whole tile columns, groups end on whole columns, and each group has its own buffer
//            [M, columns x tile_n] with its columns side by side: row-major, its chunk k is rows
//            [k M/W, (k+1) M/W) of every column, rank k's rows. The overlap GEMM stores to at most 8
//            buffers (kernels/overlap_gemm.hpp) and C_edge may take one, so there are at most 7 groups.
// Tiles narrower than tile_n (N not a multiple of it) would leave holes in C_grouped's rows; they go
// to C_edge, [rows, N % tile_n] in matrix row order, which gets one collective after the groups.
// gemm_a2a (per-destination token pools) is built in plan/strategies/signal_a2a.cpp.
// NCCL's kernels need SMs while the GEMM runs (Algorithm 1, line 3): the GEMM is persistent on
// gemm_sms SMs (by default all but the machine profile's collective_sms), or launches a CTA per tile.
#include <algorithm>
#include <stdexcept>

#include "builder_support.hpp"
#include "signal_groups.hpp"

namespace weft {

using detail::RankPlanBuilder;
using detail::SignalTile;

namespace {

struct Cut {
  std::vector<SignalTile> order;     // the tile table's order
  std::vector<int64_t> group_start;  // positions in `order`; plus order.size() at the end
  SignalLayout layout;
};

constexpr int kMaxColumnGroups = 7;

int64_t rows_per_block(const Problem& p) { return p.op == OpKind::gemm_rs ? p.m / p.world_size : p.m; }

// gemm_rs whose ranks' row blocks are not whole tile rows: groups of whole tile columns.
bool groups_whole_columns(const Problem& p, const PlanOptions& o) { return p.op == OpKind::gemm_rs && rows_per_block(p) % o.tile_m != 0; }

std::vector<SignalTile> tile_order(const Problem& p, const PlanOptions& o) {
  if (groups_whole_columns(p, o)) {
    const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
    std::vector<SignalTile> order;
    for (int64_t col = 0; col < grid.tiles_n(); ++col)
      for (int64_t row = 0; row < grid.tiles_m(); ++row) {
        SignalTile t;
        t.tile = grid.tile(grid.index(row, col));
        t.block = -1;
        t.edge = t.tile.cols < o.tile_n;
        order.push_back(t);
      }
    return order;
  }
  const int blocks = p.op == OpKind::gemm_rs ? p.world_size : 1;
  const int64_t block_rows = rows_per_block(p);
  const TileGrid grid{block_rows, p.n, o.tile_m, o.tile_n};
  std::vector<SignalTile> order;
  for (int64_t index : rasterized_order(grid, o.raster, o.swizzle))
    for (int block = 0; block < blocks; ++block) {
      SignalTile t;
      t.tile = grid.tile(index);
      t.tile.row += block * block_rows;
      t.block = block;
      t.edge = t.tile.cols < o.tile_n;
      order.push_back(t);
    }
  return order;
}

CollectiveKind collective_of(const Problem& p) {
  return p.op == OpKind::gemm_rs ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
}

Cut cut_into_groups(const Problem& p, const PlanOptions& o, double measured_gemm_seconds = 0) {
  Cut cut;
  cut.order = tile_order(p, o);
  const bool columns = groups_whole_columns(p, o);
  cut.layout = detail::choose_wave_groups(p, o, cut.order, collective_of(p), measured_gemm_seconds, columns ? kMaxColumnGroups : 0);
  // Group ends at wave ends; gemm_rs rounds them up to whole rounds of W (one tile of every block)
  // or to whole tile columns.
  const int64_t unit = columns ? (p.m + o.tile_m - 1) / o.tile_m : p.op == OpKind::gemm_rs ? p.world_size : 1;
  cut.group_start = detail::group_starts(static_cast<int64_t>(cut.order.size()), cut.layout, unit, /*keep_empty=*/false);
  return cut;
}

void require_signal_op(const Problem& p) {
  if (p.op != OpKind::gemm_ar && p.op != OpKind::gemm_rs)
    throw std::invalid_argument("signal builds plans for gemm_ar, gemm_rs and gemm_a2a, not " + std::string(to_string(p.op)));
}

// The inputs and the result, declared first in every gemm_ar/gemm_rs rank plan.
struct Operands {
  BufferId a, w, c;
};
Operands declare_operands(RankPlanBuilder& b, const Problem& p) {
  return {b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype), b.buffer("B", BufferRole::input, p.n, p.k, operand_b_dtype(p)),
          b.buffer("C", BufferRole::output, rows_per_block(p), p.n, p.output_dtype)};
}

// Tiles narrower than tile_n: stored in matrix row order in `buffer` and counted by `stored`;
// gemm_rs reduce-scatters them into `received`, gemm_ar all-reduces them in place (received = -1).
struct EdgeTiles {
  BufferId buffer = -1, received = -1;
  SignalId stored = -1;
  int64_t count = 0;
};
EdgeTiles declare_edge_tiles(RankPlanBuilder& b, const Problem& p, const PlanOptions& o, int64_t count) {
  EdgeTiles e;
  e.count = count;
  if (count == 0) return e;
  const int64_t edge_cols = p.n % o.tile_n;
  e.buffer = b.buffer("C_edge", BufferRole::scratch, p.m, edge_cols, p.output_dtype);
  if (p.op == OpKind::gemm_rs) e.received = b.buffer("C_edge_received", BufferRole::scratch, rows_per_block(p), edge_cols, p.output_dtype);
  e.stored = b.signal("edge_tiles_stored");
  return e;
}

// The edge tiles' collective, after the groups', and the move of this rank's rows into C's last
// columns; nothing without edge tiles.
void finish_edge_tiles(RankPlanBuilder& b, detail::RestoreSteps& restores, const Problem& p, int collective, const EdgeTiles& edge,
                       BufferId c) {
  if (edge.count == 0) return;
  const int64_t block_rows = rows_per_block(p), edge_cols = b.whole(edge.buffer).box.cols;
  const Region landed = b.whole(edge.received >= 0 ? edge.received : edge.buffer);
  Step& step = b.add(std::string(p.op == OpKind::gemm_rs ? "reduce_scatter" : "all_reduce") + " edge tiles", 1, Engine::nccl,
                     CollectiveStep{collective_of(p), collective, b.whole(edge.buffer), landed, {}, {}});
  step.waits.push_back(Wait{b.own(edge.stored), static_cast<uint64_t>(edge.count)});
  MoveBoxesStep back;
  back.src = landed;
  back.dst = b.whole(c);
  back.moves.push_back({Rect{0, 0, block_rows, edge_cols}, Rect{0, p.n - edge_cols, block_rows, edge_cols}});
  restores.add("place edge tiles", std::move(back));
}

// gemm_rs with groups of whole tile columns (see the top of the file).
Plan plan_reduce_scatter_by_columns(const Problem& p, const PlanOptions& o, const Cut& cut) {
  const int world = p.world_size;
  const int64_t block_rows = rows_per_block(p);
  const size_t groups = cut.group_start.size() - 1;
  // The main tile columns of each group, in order; tile column j's place among them.
  std::vector<std::vector<int64_t>> columns(groups);
  std::vector<int64_t> edge_tiles;
  for (size_t g = 0; g < groups; ++g)
    for (int64_t i = cut.group_start[g]; i < cut.group_start[g + 1]; ++i) {
      const SignalTile& t = cut.order[static_cast<size_t>(i)];
      if (t.edge) {
        edge_tiles.push_back(i);
      } else if (columns[g].empty() || columns[g].back() != t.tile.col / o.tile_n) {
        columns[g].push_back(t.tile.col / o.tile_n);
      }
    }

  Plan plan;
  plan.strategy = "signal";
  plan.problem = p;
  for (int r = 0; r < world; ++r) {
    RankPlanBuilder b(r, detail::RestoreSteps::stream_count(o.signal_restore));
    detail::RestoreSteps restores(b, o.signal_restore);
    const auto [a, w, c] = declare_operands(b, p);
    std::vector<BufferId> grouped(groups, -1), received(groups, -1);
    std::vector<SignalId> stored(groups, -1);
    for (size_t g = 0; g < groups; ++g) {
      if (columns[g].empty()) continue;
      const int64_t width = static_cast<int64_t>(columns[g].size()) * o.tile_n;
      const std::string name = "group" + std::to_string(g);
      grouped[g] = b.buffer("C_" + name, BufferRole::scratch, p.m, width, p.output_dtype);
      received[g] = b.buffer("C_" + name + "_received", BufferRole::scratch, block_rows, width, p.output_dtype);
      stored[g] = b.signal(name + "_stored");
    }
    const EdgeTiles edge = declare_edge_tiles(b, p, o, static_cast<int64_t>(edge_tiles.size()));

    GemmStep gemm = detail::signal_gemm(b.whole(a), b.whole(w), o, cut.layout);
    for (size_t g = 0; g < groups; ++g)
      for (int64_t i = cut.group_start[g]; i < cut.group_start[g + 1]; ++i) {
        const SignalTile& t = cut.order[static_cast<size_t>(i)];
        GemmTile tile;
        tile.tile = t.tile;
        if (t.edge) {
          tile.store = Region{r, edge.buffer, Rect{t.tile.row, 0, t.tile.rows, t.tile.cols}};
          tile.notify = Notify{b.own(edge.stored), 1};
        } else {
          const auto place = std::find(columns[g].begin(), columns[g].end(), t.tile.col / o.tile_n) - columns[g].begin();
          tile.store = Region{r, grouped[g], Rect{t.tile.row, place * o.tile_n, t.tile.rows, t.tile.cols}};
          tile.notify = Notify{b.own(stored[g]), 1};
        }
        gemm.tiles.push_back(tile);
      }
    b.add("gemm (tiles down whole columns, counted per wave group)", 0, Engine::sm, gemm);

    int collective = 0;
    const int64_t tiles_per_column = (p.m + o.tile_m - 1) / o.tile_m;
    for (size_t g = 0; g < groups; ++g) {
      if (columns[g].empty()) continue;
      const std::string name = "group " + std::to_string(g);
      Step& step = b.add("reduce_scatter " + name, 1, Engine::nccl,
                         CollectiveStep{CollectiveKind::reduce_scatter, collective++, b.whole(grouped[g]), b.whole(received[g]), {}, {}});
      step.waits.push_back(Wait{b.own(stored[g]), static_cast<uint64_t>(columns[g].size() * static_cast<size_t>(tiles_per_column))});
      MoveBoxesStep back;
      back.src = b.whole(received[g]);
      back.dst = b.whole(c);
      for (size_t place = 0; place < columns[g].size(); ++place)
        back.moves.push_back({Rect{0, static_cast<int64_t>(place) * o.tile_n, block_rows, o.tile_n},
                              Rect{0, columns[g][place] * o.tile_n, block_rows, o.tile_n}});
      restores.add("restore order of " + name, std::move(back));
    }
    finish_edge_tiles(b, restores, p, collective, edge, c);
    restores.finish();
    b.set_output(b.whole(c));
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace

SignalLayout signal_layout(const Problem& p, const PlanOptions& o, double measured_gemm_seconds) {
  check_problem(p);
  if (p.op == OpKind::gemm_a2a) return detail::signal_layout_all_to_all(p, o, measured_gemm_seconds);
  require_signal_op(p);
  return cut_into_groups(p, o, measured_gemm_seconds).layout;
}

Plan plan_signal(const Problem& p, const PlanOptions& o) {
  check_problem(p);
  if (p.op == OpKind::gemm_a2a) return detail::plan_signal_all_to_all(p, o);
  require_signal_op(p);
  const Cut cut = cut_into_groups(p, o);
  if (groups_whole_columns(p, o)) return plan_reduce_scatter_by_columns(p, o, cut);
  const int world = p.world_size;
  const bool rs = p.op == OpKind::gemm_rs;
  const int64_t block_rows = rows_per_block(p);
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
        const SignalTile& t = cut.order[i];
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
  for (const SignalTile& t : cut.order) edge_count += t.edge;

  Plan plan;
  plan.strategy = "signal";
  plan.problem = p;
  for (int r = 0; r < world; ++r) {
    RankPlanBuilder b(r, detail::RestoreSteps::stream_count(o.signal_restore));
    detail::RestoreSteps restores(b, o.signal_restore);
    const auto [a, w, c] = declare_operands(b, p);
    const BufferId grouped = grouped_rows > 0 ? b.buffer("C_grouped", BufferRole::scratch, grouped_rows, o.tile_n, p.output_dtype) : -1;
    const BufferId received =
        rs && grouped_rows > 0 ? b.buffer("C_received", BufferRole::scratch, grouped_rows / world, o.tile_n, p.output_dtype) : -1;
    std::vector<SignalId> stored(groups, -1);
    for (size_t g = 0; g < groups; ++g)
      if (group_tiles[g] > 0) stored[g] = b.signal("group" + std::to_string(g) + "_stored");
    const EdgeTiles edge = declare_edge_tiles(b, p, o, edge_count);

    GemmStep gemm = detail::signal_gemm(b.whole(a), b.whole(w), o, cut.layout);
    size_t g = 0;
    for (size_t i = 0; i < cut.order.size(); ++i) {
      while (static_cast<int64_t>(i) >= cut.group_start[g + 1]) ++g;
      const SignalTile& t = cut.order[i];
      GemmTile tile;
      tile.tile = t.tile;
      if (t.edge) {
        tile.store = Region{r, edge.buffer, Rect{t.tile.row, 0, t.tile.rows, t.tile.cols}};
        tile.notify = Notify{b.own(edge.stored), 1};
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
          const SignalTile& t = cut.order[static_cast<size_t>(i)];
          if (t.edge || t.block != r) continue;
          back.moves.push_back({Rect{at, 0, t.tile.rows, t.tile.cols}, Rect{t.tile.row - r * block_rows, t.tile.col, t.tile.rows, t.tile.cols}});
          at += t.tile.rows;
        }
        received_row += share;
      } else {
        Step& step = b.add("all_reduce " + name, 1, Engine::nccl, CollectiveStep{CollectiveKind::all_reduce, collective++, block, block, {}, {}});
        step.waits.push_back(Wait{b.own(stored[gi]), static_cast<uint64_t>(group_tiles[gi])});
        for (int64_t i = cut.group_start[gi]; i < cut.group_start[gi + 1]; ++i) {
          const SignalTile& t = cut.order[static_cast<size_t>(i)];
          if (t.edge) continue;
          back.moves.push_back({Rect{slot_row[static_cast<size_t>(i)], 0, t.tile.rows, t.tile.cols}, t.tile});
        }
      }
      restores.add("restore order of " + name, std::move(back));
    }
    finish_edge_tiles(b, restores, p, collective, edge, c);
    restores.finish();
    b.set_output(b.whole(c));
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
