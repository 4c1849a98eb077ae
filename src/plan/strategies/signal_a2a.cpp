// `signal` for gemm_a2a (flashoverlap.txt Section 3.3, "a specific memory pool for each destination
// GPU"): the rows of a GEMM+All-to-All are tokens, each bound for one rank, so a group's tiles are
// stored into per-destination pools and the group's collective is an all-to-all of those pools.
//
// The overlap GEMM stores whole tiles (TMA), not scattered rows, so the tokens are grouped by
// destination before the GEMM instead of in its epilogue: A's rows are permuted into A_sorted, each
// destination's rows starting on a tile row (the block is padded up to a whole number of tile
// rows; padding rows are computed by no stored tile). Every tile then holds tokens of one
// destination. Tiles run in raster order over A_sorted, so each wave group holds tiles for every
// destination and each group's all-to-all uses every link.
//
// C_pool ([rows, tile_n]) holds the groups one after another; within a group, destination after
// destination; within a destination, the group's tiles in execution order, each taking its valid
// rows. Tiles narrower than tile_n (N not a multiple of it) would leave holes in C_pool's rows; they
// go to C_edge_pool, A's rows grouped by destination, which one all-to-all after the groups sends
// straight into the order C has.
// Group g's block of C_pool is exactly the send buffer of an all-to-all; C_received gets, per
// group, source after source, the tiles that rank sent; a box move then puts each tile at its
// tokens' rows in C (source rank, then row order) and its columns.
//
// Ranks route differently, so their tables differ in length; the wave partition is chosen on the
// longest table and applied to every rank, groups left empty on a rank are kept, so that every rank
// joins the same number of all-to-alls.
#include <algorithm>
#include <stdexcept>

#include "builder_support.hpp"
#include "signal_groups.hpp"

namespace weft::detail {

namespace {

// A_sorted's rows on one rank: destination d's tokens start at first_row[d], a multiple of tile_m.
struct SortedRows {
  std::vector<int64_t> first_row;  // plus the padded total at the end
};

SortedRows sorted_rows(const RoutedRows& routed, int rank, int world, int tile_m) {
  SortedRows s;
  int64_t row = 0;
  for (int d = 0; d < world; ++d) {
    s.first_row.push_back(row);
    row += (routed.count(rank, d) + tile_m - 1) / tile_m * tile_m;
  }
  s.first_row.push_back(row);
  return s;
}

// Rank `rank`'s tiles in execution order; SignalTile::block is the destination.
std::vector<SignalTile> tile_order(const Problem& p, const PlanOptions& o, const RoutedRows& routed, int rank) {
  const SortedRows sorted = sorted_rows(routed, rank, p.world_size, o.tile_m);
  const int64_t padded = sorted.first_row.back();
  std::vector<SignalTile> order;
  if (padded == 0) return order;
  const TileGrid grid{padded, p.n, o.tile_m, o.tile_n};
  for (int64_t index : rasterized_order(grid, o.raster, o.swizzle)) {
    SignalTile t;
    t.tile = grid.tile(index);
    const auto next = std::upper_bound(sorted.first_row.begin(), sorted.first_row.end(), t.tile.row);
    t.block = static_cast<int>(next - sorted.first_row.begin()) - 1;
    const int64_t block_end = sorted.first_row[static_cast<size_t>(t.block)] + routed.count(rank, t.block);
    t.tile.rows = std::min<int64_t>(t.tile.rows, block_end - t.tile.row);
    t.edge = t.tile.cols < o.tile_n;
    if (t.tile.rows > 0) order.push_back(t);
  }
  return order;
}

struct RankCut {
  std::vector<SignalTile> order;
  std::vector<int64_t> group_start;  // one entry per group plus the end, the same count on every rank
};

struct AllToAllCut {
  std::vector<RankCut> ranks;
  SignalLayout layout;  // chosen on the longest table
};

AllToAllCut cut_into_groups(const Problem& p, const PlanOptions& o, double measured_gemm_seconds) {
  const RoutedRows routed(p);
  AllToAllCut cut;
  size_t longest = 0;
  for (int r = 0; r < p.world_size; ++r) {
    cut.ranks.push_back(RankCut{tile_order(p, o, routed, r), {}});
    if (cut.ranks.back().order.size() > cut.ranks[longest].order.size()) longest = static_cast<size_t>(r);
  }
  cut.layout = choose_wave_groups(p, o, cut.ranks[longest].order, CollectiveKind::all_to_all, measured_gemm_seconds);
  for (RankCut& rc : cut.ranks) rc.group_start = group_starts(static_cast<int64_t>(rc.order.size()), cut.layout, 1, /*keep_empty=*/true);
  return cut;
}

}  // namespace

SignalLayout signal_layout_all_to_all(const Problem& p, const PlanOptions& o, double measured_gemm_seconds) {
  return cut_into_groups(p, o, measured_gemm_seconds).layout;
}

Plan plan_signal_all_to_all(const Problem& p, const PlanOptions& o) {
  const AllToAllCut cut = cut_into_groups(p, o, 0);
  const RoutedRows routed(p);
  const int world = p.world_size;
  const size_t groups = cut.layout.partition.size();

  // sent[s][g][d]: rows rank s's group g sends to rank d (its tiles' valid rows).
  std::vector<std::vector<std::vector<int64_t>>> sent(
      static_cast<size_t>(world), std::vector<std::vector<int64_t>>(groups, std::vector<int64_t>(static_cast<size_t>(world), 0)));
  for (int s = 0; s < world; ++s) {
    const RankCut& rc = cut.ranks[static_cast<size_t>(s)];
    for (size_t g = 0; g < groups; ++g)
      for (int64_t i = rc.group_start[g]; i < rc.group_start[g + 1]; ++i) {
        const SignalTile& t = rc.order[static_cast<size_t>(i)];
        if (!t.edge) sent[static_cast<size_t>(s)][g][static_cast<size_t>(t.block)] += t.tile.rows;
      }
  }
  auto group_rows_sent = [&](int s, size_t g) {
    int64_t rows = 0;
    for (int64_t n : sent[static_cast<size_t>(s)][g]) rows += n;
    return rows;
  };
  auto group_rows_received = [&](int d, size_t g) {
    int64_t rows = 0;
    for (int s = 0; s < world; ++s) rows += sent[static_cast<size_t>(s)][g][static_cast<size_t>(d)];
    return rows;
  };
  // A group nobody sends anything in (possible when every table is shorter than the longest's
  // waves suggest) is dropped on every rank alike.
  std::vector<bool> used(groups, false);
  for (size_t g = 0; g < groups; ++g)
    for (int s = 0; s < world; ++s) used[g] = used[g] || group_rows_sent(s, g) > 0;

  Plan plan;
  plan.strategy = "signal";
  plan.problem = p;
  for (int r = 0; r < world; ++r) {
    const RankCut& rc = cut.ranks[static_cast<size_t>(r)];
    const SortedRows sorted = sorted_rows(routed, r, world, o.tile_m);
    int64_t pool_rows = 0, received_rows = 0;
    for (size_t g = 0; g < groups; ++g) {
      pool_rows += group_rows_sent(r, g);
      received_rows += group_rows_received(r, g);
    }
    RankPlanBuilder b(r, RestoreSteps::stream_count(o.signal_restore));
    RestoreSteps restores(b, o.signal_restore);
    const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
    const BufferId w = b.buffer("B", BufferRole::input, p.n, p.k, operand_b_dtype(p));
    const BufferId c = b.buffer("C", BufferRole::output, output_rows(p, r), p.n, p.output_dtype);
    const BufferId a_sorted = b.buffer("A_sorted", BufferRole::scratch, sorted.first_row.back(), p.k, p.input_dtype);
    const BufferId pool = b.buffer("C_pool", BufferRole::scratch, pool_rows, o.tile_n, p.output_dtype);
    const BufferId received = received_rows > 0 ? b.buffer("C_received", BufferRole::scratch, received_rows, o.tile_n, p.output_dtype) : -1;
    const int64_t edge_cols = p.n % o.tile_n;
    const BufferId edge_pool = edge_cols > 0 ? b.buffer("C_edge_pool", BufferRole::scratch, p.m, edge_cols, p.output_dtype) : -1;
    const BufferId edge_received =
        edge_cols > 0 && output_rows(p, r) > 0 ? b.buffer("C_edge_received", BufferRole::scratch, output_rows(p, r), edge_cols, p.output_dtype) : -1;
    std::vector<SignalId> stored(groups, -1);
    std::vector<int64_t> group_tiles(groups, 0);
    int64_t edge_tiles = 0;
    for (size_t g = 0; g < groups; ++g) {
      for (int64_t i = rc.group_start[g]; i < rc.group_start[g + 1]; ++i) {
        const bool edge = rc.order[static_cast<size_t>(i)].edge;
        group_tiles[g] += !edge;
        edge_tiles += edge;
      }
      if (group_tiles[g] > 0) stored[g] = b.signal("group" + std::to_string(g) + "_stored");
    }
    const SignalId edge_stored = edge_tiles > 0 ? b.signal("edge_tiles_stored") : -1;

    const PermuteRowsStep by_destination = rows_by_destination(p, r, b.whole(a), b.whole(a));
    for (int d = 0; d < world; ++d) {
      const int64_t count = routed.count(r, d);
      if (count == 0) continue;
      PermuteRowsStep part;
      part.src = b.whole(a);
      part.dst = b.rows(a_sorted, sorted.first_row[static_cast<size_t>(d)], count);
      const auto first = by_destination.source_rows.begin() + routed.sent_before(r, d);
      part.source_rows.assign(first, first + count);
      b.add("tokens for rank " + std::to_string(d) + " to A_sorted", 0, Engine::sm, part);
    }

    // Pool slots: group by group, destination by destination, execution order within.
    std::vector<int64_t> slot_row(rc.order.size(), -1);
    std::vector<int64_t> group_pool_row(groups + 1, 0);
    int64_t row = 0;
    for (size_t g = 0; g < groups; ++g) {
      group_pool_row[g] = row;
      for (int d = 0; d < world; ++d)
        for (int64_t i = rc.group_start[g]; i < rc.group_start[g + 1]; ++i) {
          const SignalTile& t = rc.order[static_cast<size_t>(i)];
          if (t.block != d || t.edge) continue;
          slot_row[static_cast<size_t>(i)] = row;
          row += t.tile.rows;
        }
    }
    group_pool_row[groups] = row;

    GemmStep gemm = signal_gemm(b.whole(a_sorted), b.whole(w), o, cut.layout);
    for (size_t g = 0; g < groups; ++g)
      for (int64_t i = rc.group_start[g]; i < rc.group_start[g + 1]; ++i) {
        const SignalTile& t = rc.order[static_cast<size_t>(i)];
        GemmTile tile;
        tile.tile = t.tile;
        if (t.edge) {
          const int64_t token_row = routed.sent_before(r, t.block) + (t.tile.row - sorted.first_row[static_cast<size_t>(t.block)]);
          tile.store = Region{r, edge_pool, Rect{token_row, 0, t.tile.rows, t.tile.cols}};
          tile.notify = Notify{b.own(edge_stored), 1};
        } else {
          tile.store = Region{r, pool, Rect{slot_row[static_cast<size_t>(i)], 0, t.tile.rows, t.tile.cols}};
          tile.notify = Notify{b.own(stored[g]), 1};
        }
        gemm.tiles.push_back(tile);
      }
    if (!gemm.tiles.empty()) b.add("gemm (tokens by destination, tiles into per-destination pools)", 0, Engine::sm, gemm);

    int collective = 0;
    int64_t received_row = 0;
    for (size_t g = 0; g < groups; ++g) {
      if (!used[g]) continue;
      const std::string name = "group " + std::to_string(g);
      CollectiveStep exchange{CollectiveKind::all_to_all, collective++, b.rows(pool, group_pool_row[g], group_pool_row[g + 1] - group_pool_row[g]),
                              Region{}, {}, {}};
      const int64_t incoming = group_rows_received(r, g);
      exchange.dst = received >= 0 ? b.rows(received, received_row, incoming) : b.rows(pool, 0, 0);
      for (int q = 0; q < world; ++q) {
        exchange.send_rows.push_back(sent[static_cast<size_t>(r)][g][static_cast<size_t>(q)]);
        exchange.recv_rows.push_back(sent[static_cast<size_t>(q)][g][static_cast<size_t>(r)]);
      }
      Step& step = b.add("all_to_all " + name, 1, Engine::nccl, exchange);
      if (group_tiles[g] > 0) step.waits.push_back(Wait{b.own(stored[g]), static_cast<uint64_t>(group_tiles[g])});
      if (incoming == 0) continue;

      // What arrived: per source, that source's group-g tiles bound here, in its execution order.
      MoveBoxesStep back;
      back.src = b.whole(received);
      back.dst = b.whole(c);
      int64_t at = received_row;
      for (int s = 0; s < world; ++s) {
        const RankCut& source = cut.ranks[static_cast<size_t>(s)];
        const int64_t first_sorted_row = sorted_rows(routed, s, world, o.tile_m).first_row[static_cast<size_t>(r)];
        for (int64_t i = source.group_start[g]; i < source.group_start[g + 1]; ++i) {
          const SignalTile& t = source.order[static_cast<size_t>(i)];
          if (t.block != r || t.edge) continue;
          const int64_t token = routed.received_before(s, r) + (t.tile.row - first_sorted_row);
          back.moves.push_back({Rect{at, 0, t.tile.rows, t.tile.cols}, Rect{token, t.tile.col, t.tile.rows, t.tile.cols}});
          at += t.tile.rows;
        }
      }
      restores.add("tokens of " + name + " to their rows", std::move(back));
      received_row += incoming;
    }
    if (edge_cols > 0) {
      // Every rank has edge tiles (M >= 1), so every rank joins; A's grouping by destination is
      // exactly the all-to-all's send order, and the receive order is C's.
      CollectiveStep exchange = all_to_all_by_destination(p, r, b.whole(edge_pool), edge_received >= 0 ? b.whole(edge_received) : b.rows(edge_pool, 0, 0));
      exchange.id = collective++;
      Step& step = b.add("all_to_all edge tiles", 1, Engine::nccl, exchange);
      step.waits.push_back(Wait{b.own(edge_stored), static_cast<uint64_t>(edge_tiles)});
      if (edge_received >= 0) {
        MoveBoxesStep back;
        back.src = b.whole(edge_received);
        back.dst = b.whole(c);
        back.moves.push_back({Rect{0, 0, output_rows(p, r), edge_cols}, Rect{0, p.n - edge_cols, output_rows(p, r), edge_cols}});
        restores.add("place edge tiles", std::move(back));
      }
    }
    restores.finish();
    b.set_output(b.whole(c));
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft::detail
