// `fused` (Flux, flux.txt Sections 3 and 4): the communication is fused into one overlap GEMM over
// the whole problem, which is never split into smaller GEMMs.
//
//   ag_gemm: the own shard's tiles read their A rows in place from the op's input where m is a
//            multiple of the tile height (else the GEMM's stream first copies the local A shard
//            into the gathered A, which the GEMM reads whole, Flux's layout). Each peer's shard is
//            pulled in `comm_chunks` row chunks on a stream of its own (copies queued on one
//            stream run one after another, one link at a time), raising a counter of that peer's
//            alone: a counter with one writer is written by the executor without a kernel (the
//            GEMM holds every SM). The GEMM's tiles run in the arrival order of their rows (Section
//            4.1's swizzle aligned with the pulls): the own shard first, then chunk by chunk, each
//            chunk's shards in ring order starting after the own rank (Section 4.3); each tile waits
//            (its prologue) until the chunk holding its rows has arrived. Where a tile's rows span
//            two shards (m not a multiple of the tile height) one stream pulls every shard in ring
//            order into one counter, as a tile waits on one counter. With PlanOptions::all_gather_source
//            push (tiles within shards), each rank instead pushes its shard's chunks from the
//            caller's memory into every peer's gathered A, in the same order, and writes the
//            peer's counter for it: no copy-in.
//   gemm_rs: each tile whose rows belong to a peer d is stored straight into d's receive slot for
//            this rank (the epilogue's peer store) and counted on d; rank r starts with rank r+1's
//            rows and ends with its own (Section 4.1: no two ranks write to one peer at once).
//            Where M/W is a multiple of the tile height, the reduction is done as the partial sums
//            arrive, in the GEMM's own epilogue: a tile of r's own rows, computed last, waits
//            (after its MMAs) until the W-1 peers have stored theirs, adds them and is stored into
//            C, so no pass follows the GEMM. Rank q computes r's rows at position (r - q - 1) mod W
//            of W, so the peers are done with them when r reaches its own. Otherwise a tile row
//            spans two ranks: those tiles run first and are stored locally, behind the slots of the
//            receive buffer, stream 1 pushes each rank's part with the copy engine, and each rank
//            sums its W slots when every slot is complete (the Reduce branch of Section 3.1, as a
//            separate step).
#include <algorithm>
#include <stdexcept>

#include "builder_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kComm = 1;

// ag_gemm: every tile's rows lie in one shard, so the own shard's tiles read their rows in place
// and each peer's shard has a pull stream and a counter of its own (build_ag_gemm).
bool tiles_within_shards(const Problem& p, const PlanOptions& o) { return p.m % o.tile_m == 0; }

int chunks_per_shard(const PlanOptions& o, int64_t shard_rows) {
  if (o.comm_chunks < 0) throw std::invalid_argument("fused: comm_chunks must be >= 0, got " + std::to_string(o.comm_chunks));
  // Flux tunes this between one chunk per shard and one per GEMM tile row (Figure 10); one per
  // shard is the coarsest, and the default until tuned.
  const int64_t chunks = o.comm_chunks == 0 ? 1 : o.comm_chunks;
  return static_cast<int>(std::clamp<int64_t>(chunks, 1, std::max<int64_t>(shard_rows, 1)));
}

void build_ag_gemm(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  // Where every tile's rows lie in one shard (m a multiple of the tile height), the own shard's
  // tiles read their rows in place, from the op's input, and each peer has a pull stream and a
  // counter. Otherwise the own shard goes into place on the GEMM's stream, before it (a copy
  // within one GPU runs as a kernel, which would find no free SM while the GEMM, holding them
  // all, waits for it), and one stream and counter serve every peer.
  const bool per_peer = tiles_within_shards(p, o);
  // Push (PlanOptions::all_gather_source): each rank sends its shard's chunks to every peer on a
  // stream per peer and writes that peer's counter for it, so every counter keeps one writer (a
  // counter several ranks raised would need a kernel, and the GEMMs hold every SM). That needs a
  // counter per peer: where tiles span shards, the plan pulls.
  const bool push = per_peer && o.all_gather_source == AllGatherSource::push;
  const detail::AllGatherOperands operands =
      detail::declare_all_gather_operands(p, b, push ? AllGatherSource::push : AllGatherSource::pull);
  const BufferId a = operands.a, w = operands.b, gathered = operands.gathered, c = operands.c;
  std::vector<SignalId> arrived;  // per ring offset i (1 .. W-1): the shard of rank r + i; or one for all
  if (per_peer)
    for (int i = 1; i < world; ++i) arrived.push_back(b.signal("chunks_from_rank" + std::to_string((r + i) % world)));
  else
    arrived.push_back(b.signal("chunks_arrived"));
  // needed[row]: the counter and the count it must reach before row `row` of the gathered A may be
  // read (count 0: a row of the own shard); order[row]: when its chunk lands, (chunk, ring offset).
  std::vector<Wait> needed(static_cast<size_t>(world) * static_cast<size_t>(p.m), Wait{SignalRef{}, 0});
  std::vector<std::pair<int64_t, int>> order(needed.size(), {-1, 0});
  std::vector<uint64_t> copies(arrived.size(), 0);
  const auto cuts = detail::split_rows(p.m, chunks_per_shard(o, p.m));
  for (size_t j = 0; j + 1 < cuts.size(); ++j)
    for (int i = 1; i < world; ++i) {
      const int src = (r + i) % world;
      const int64_t first = cuts[j], rows = cuts[j + 1] - cuts[j];
      if (rows == 0) continue;
      const size_t counter = per_peer ? static_cast<size_t>(i - 1) : 0;
      const int stream = per_peer ? kComm + i - 1 : kComm;
      if (push) {
        // Chunk j of this rank's shard to rank r - i, on whose ring this rank sits at offset i: the
        // chunks a rank receives come from r + 1, r + 2, ... at each step, as pulls would bring them.
        const int dst = (r - i + world) % world;
        Step& send = b.add("push chunk " + std::to_string(j) + " to rank " + std::to_string(dst), stream, Engine::copy_engine,
                           CopyStep{b.rows(a, first, rows), b.rows(gathered, r * p.m + first, rows, dst)});
        send.notifies.push_back({b.signal_on(arrived[static_cast<size_t>(i - 1)], dst), 1});
      } else {
        Step& step = b.add("pull rank " + std::to_string(src) + " chunk " + std::to_string(j), stream, Engine::copy_engine,
                           CopyStep{b.rows(a, first, rows, src), b.rows(gathered, src * p.m + first, rows)});
        step.notifies.push_back({b.own(arrived[counter]), 1});
      }
      ++copies[counter];
      for (int64_t row = src * p.m + first; row < src * p.m + first + rows; ++row) {
        needed[static_cast<size_t>(row)] = Wait{b.own(arrived[counter]), copies[counter]};
        order[static_cast<size_t>(row)] = {static_cast<int64_t>(j), i};
      }
    }
  if (!per_peer) b.add("copy own shard", kCompute, Engine::sm, CopyStep{b.whole(a), b.rows(gathered, r * p.m, p.m)});
  // Per peer, the own shard's tiles read it in A; otherwise it was copied into place.
  std::vector<Region> pieces;
  for (int s = 0; s < world; ++s) pieces.push_back(per_peer && s == r ? b.whole(a) : b.rows(gathered, s * p.m, p.m));
  b.set_gathered_a(std::move(pieces));

  // Tiles in arrival order of their rows (Flux aligns the tile order with the signals' order), the
  // raster and swizzle kept among the tiles one copy completes.
  GemmStep gemm = detail::gemm_over(b.whole(gathered), b.whole(w), o);
  const TileGrid grid{world * p.m, p.n, o.tile_m, o.tile_n};
  std::vector<std::pair<int64_t, int>> tile_order;  // per tile, when its last row lands
  for (int64_t index : rasterized_order(grid, o.raster, o.swizzle)) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = b.at(c, tile.tile);
    std::pair<int64_t, int> lands{-1, 0};
    // The rows' latest chunk: one counter in per-peer mode (a tile within one shard), else the
    // one counter every pull raises in arrival order.
    for (int64_t row = tile.tile.row; row < tile.tile.row_end(); ++row) {
      const Wait& need = needed[static_cast<size_t>(row)];
      if (need.value > 0 && (!tile.wait || need.value > tile.wait->value)) tile.wait = need;
      lands = std::max(lands, order[static_cast<size_t>(row)]);
    }
    if (per_peer && tile.tile.row / p.m == r) tile.a_rows = b.rows(a, tile.tile.row - r * p.m, tile.tile.rows);
    gemm.tiles.push_back(tile);
    tile_order.push_back(lands);
  }
  std::vector<size_t> by_arrival(gemm.tiles.size());
  for (size_t t = 0; t < by_arrival.size(); ++t) by_arrival[t] = t;
  std::stable_sort(by_arrival.begin(), by_arrival.end(), [&](size_t x, size_t y) { return tile_order[x] < tile_order[y]; });
  std::vector<GemmTile> arrival_ordered;
  for (size_t t : by_arrival) arrival_ordered.push_back(std::move(gemm.tiles[t]));
  gemm.tiles = std::move(arrival_ordered);
  b.add("gemm (tiles wait for their rows)", kCompute, Engine::sm, std::move(gemm));
  b.set_output(b.whole(c));
}

// Rows [first, first + rows) of the output.
struct RowSpan {
  int64_t first = 0, rows = 0;
};

// Every tile row within one rank's rows: peers' tiles into their slots, own tiles last, each adding
// the peers' partial sums in its epilogue.
void build_gemm_rs_reduced_in_epilogue(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const int64_t share = p.m / world;
  const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  // Slot j (rows [j * share, (j + 1) * share)) receives rank (r + 1 + j) % W's partial sums of
  // this rank's rows: W-1 slots, in the order the own tiles add them.
  BufferId received = -1;
  SignalId stored = -1;
  if (world > 1) {
    received = b.buffer("received", BufferRole::scratch, (world - 1) * share, p.n, p.output_dtype, /*symmetric=*/true);
    stored = b.signal("peer_tiles_stored");
  }
  const BufferId c = b.buffer("C", BufferRole::output, share, p.n, p.output_dtype);
  auto slot_on = [&](int d) { return static_cast<int64_t>((r - d - 1 + world) % world); };  // this rank's slot on d

  GemmStep gemm = detail::gemm_over(b.whole(a), b.whole(w), o);
  const auto order = rank_shifted_order(grid, rasterized_order(grid, o.raster, o.swizzle), share, world, r, /*first_offset=*/1);
  uint64_t own_tiles = 0;
  for (int64_t index : order)
    if (grid.tile(index).row / share == r) ++own_tiles;  // the same count on every rank: the grid is
  for (int64_t index : order) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    const int d = static_cast<int>(tile.tile.row / share);
    const int64_t row_in_share = tile.tile.row - d * share;
    if (d != r) {
      tile.store = Region{d, received, Rect{slot_on(d) * share + row_in_share, tile.tile.col, tile.tile.rows, tile.tile.cols}};
      tile.notify = Notify{b.signal_on(stored, d), 1};
    } else {
      tile.store = Region{r, c, Rect{row_in_share, tile.tile.col, tile.tile.rows, tile.tile.cols}};
      if (world > 1) tile.wait = Wait{b.own(stored), static_cast<uint64_t>(world - 1) * own_tiles};
      for (int j = 0; j + 1 < world; ++j)
        tile.addends.push_back(Region{r, received, Rect{j * share + row_in_share, tile.tile.col, tile.tile.rows, tile.tile.cols}});
    }
    gemm.tiles.push_back(tile);
  }
  b.add("gemm (peers' tiles into their slots; own tiles add the slots in their epilogue)", kCompute, Engine::sm, std::move(gemm));
  b.set_output(b.whole(c));
}

void build_gemm_rs(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const int64_t share = p.m / world;  // rows each rank receives
  const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
  if (share % o.tile_m == 0) {
    build_gemm_rs_reduced_in_epilogue(p, o, b);
    return;
  }
  auto owner = [&](int64_t row) { return static_cast<int>(row / share); };
  // Tile rows that span two ranks' rows; they are stored locally, compactly, behind the slots.
  std::vector<int64_t> spanning_rows_before(static_cast<size_t>(grid.tiles_m()) + 1, 0);
  for (int64_t t = 0; t < grid.tiles_m(); ++t) {
    const Rect first = grid.tile(grid.index(t, 0));
    const bool spans = owner(first.row) != owner(first.row_end() - 1);
    spanning_rows_before[static_cast<size_t>(t) + 1] = spanning_rows_before[static_cast<size_t>(t)] + (spans ? first.rows : 0);
  }
  const int64_t spanning_rows = spanning_rows_before.back();
  auto spans = [&](int64_t tile_row) {
    return spanning_rows_before[static_cast<size_t>(tile_row) + 1] > spanning_rows_before[static_cast<size_t>(tile_row)];
  };

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  // Slot q (rows [q * share, (q + 1) * share)) receives rank q's partial sums of this rank's rows.
  const BufferId received = b.buffer("received", BufferRole::scratch, p.m + spanning_rows, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, share, p.n, p.output_dtype);
  // Counters only where they are raised (the same on every rank: the grid is).
  std::vector<SignalId> stored_by, pushed_by;
  SignalId spanning_stored = -1;
  if (spanning_rows < p.m)
    for (int q = 0; q < world; ++q) stored_by.push_back(b.signal("tiles_from_rank" + std::to_string(q)));
  if (spanning_rows > 0) {
    for (int q = 0; q < world; ++q) pushed_by.push_back(b.signal("pushes_from_rank" + std::to_string(q)));
    spanning_stored = b.signal("spanning_tiles_stored");
  }

  // Each rank's parts of the spanning tile rows, as pushes from behind the slots into its slot.
  struct Push {
    int destination;
    RowSpan rows;  // output rows
  };
  std::vector<Push> pushes;
  for (int64_t t = 0; t < grid.tiles_m(); ++t) {
    if (!spans(t)) continue;
    const Rect first = grid.tile(grid.index(t, 0));
    for (int64_t row = first.row; row < first.row_end();) {
      const int d = owner(row);
      const int64_t end = std::min(first.row_end(), static_cast<int64_t>(d + 1) * share);
      pushes.push_back({d, {row, end - row}});
      row = end;
    }
  }
  std::vector<uint64_t> pushes_into(static_cast<size_t>(world), 0), tiles_into(static_cast<size_t>(world), 0);
  for (const Push& push : pushes) ++pushes_into[static_cast<size_t>(push.destination)];

  GemmStep gemm = detail::gemm_over(b.whole(a), b.whole(w), o);
  auto order = rank_shifted_order(grid, rasterized_order(grid, o.raster, o.swizzle), share, world, r, /*first_offset=*/1);
  std::stable_partition(order.begin(), order.end(), [&](int64_t index) { return spans(grid.tile(index).row / o.tile_m); });
  int64_t spanning_tiles = 0;
  for (int64_t index : order) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    const int64_t tile_row = tile.tile.row / o.tile_m;
    if (spans(tile_row)) {
      tile.store = Region{r, received, Rect{p.m + spanning_rows_before[static_cast<size_t>(tile_row)], tile.tile.col, tile.tile.rows, tile.tile.cols}};
      tile.notify = Notify{b.own(spanning_stored), 1};
      ++spanning_tiles;
    } else {
      const int d = owner(tile.tile.row);
      tile.store = Region{d, received, Rect{r * share + tile.tile.row - d * share, tile.tile.col, tile.tile.rows, tile.tile.cols}};
      tile.notify = Notify{b.signal_on(stored_by[static_cast<size_t>(r)], d), 1};
      ++tiles_into[static_cast<size_t>(d)];
    }
    gemm.tiles.push_back(tile);
  }
  b.add("gemm (tiles stored into their rank's slot)", kCompute, Engine::sm, std::move(gemm));

  // Pushes in ring order after the own rank, like the tiles.
  std::stable_sort(pushes.begin(), pushes.end(),
                   [&](const Push& x, const Push& y) { return (x.destination - r - 1 + world) % world < (y.destination - r - 1 + world) % world; });
  bool first_push = true;
  for (const Push& push : pushes) {
    const int64_t behind = p.m + spanning_rows_before[static_cast<size_t>(push.rows.first / o.tile_m)] + push.rows.first % o.tile_m;
    const int d = push.destination;
    Step& step = b.add("push rows " + std::to_string(push.rows.first) + ".." + std::to_string(push.rows.first + push.rows.rows) + " to rank " +
                           std::to_string(d),
                       kComm, Engine::copy_engine,
                       CopyStep{b.rows(received, behind, push.rows.rows), b.rows(received, r * share + push.rows.first - d * share, push.rows.rows, d)});
    if (first_push) step.waits.push_back({b.own(spanning_stored), static_cast<uint64_t>(spanning_tiles)});
    first_push = false;
    step.notifies.push_back({b.signal_on(pushed_by[static_cast<size_t>(r)], d), 1});
  }

  ReduceStep sum;
  for (int q = 0; q < world; ++q) sum.srcs.push_back(b.rows(received, q * share, share));
  sum.dst = b.whole(c);
  Step& reduce = b.add("sum the slots", kCompute, Engine::sm, std::move(sum));
  // Every rank stores the same tiles into this rank's slot (the grid is the same on every rank).
  for (int q = 0; q < world; ++q) {
    if (tiles_into[static_cast<size_t>(r)]) reduce.waits.push_back({b.own(stored_by[static_cast<size_t>(q)]), tiles_into[static_cast<size_t>(r)]});
    if (pushes_into[static_cast<size_t>(r)]) reduce.waits.push_back({b.own(pushed_by[static_cast<size_t>(q)]), pushes_into[static_cast<size_t>(r)]});
  }
  b.set_output(b.whole(c));
}

}  // namespace

Plan plan_fused(const Problem& p, const PlanOptions& options) {
  check_problem(p);
  if (p.op != OpKind::ag_gemm && p.op != OpKind::gemm_rs)
    throw std::invalid_argument("fused plans are built for ag_gemm and gemm_rs, not " + std::string(to_string(p.op)));
  Plan plan;
  plan.strategy = "fused";
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    const bool pull_streams = p.op == OpKind::ag_gemm && tiles_within_shards(p, options);
    RankPlanBuilder b(r, pull_streams ? kComm + std::max(1, p.world_size - 1) : 2);
    if (p.op == OpKind::ag_gemm) build_ag_gemm(p, options, b);
    else build_gemm_rs(p, options, b);
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
