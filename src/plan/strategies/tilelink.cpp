// `tilelink` (TileLink, tilelink.txt §3–5): the GEMM and the communication run side by side on
// disjoint SMs and meet tile by tile through device-side notify/wait, each with its own tile and
// order. The communication is one companion launch (Step::companion) on TileLinkOptions::comm_sms
// CTAs; the overlap GEMM keeps the other SMs (GemmStep::sm_limit). A communication tile is
// comm_tile_rows rows of a rank's part (tile::StaticTileMap, the mapping the device code shares).
//
//   ag_gemm: the companion copies the own shard's tiles into the gathered A, then pulls the peers'
//            tiles (tile_pull_data) in ring order, or all-to-all (tile c of every peer, then c+1);
//            each tile raises one counter, and each GEMM tile waits (consumer_tile_wait) until the
//            communication tiles holding its rows are in. GEMM tiles run in their rows' arrival order.
//   gemm_rs: every rank computes the blocks of rows in ring order starting after its own, block d's
//            communication tiles one after another, storing its partial sums locally and counting
//            each GEMM tile on d (peer_tile_notify). Rank d's companion reduces each communication
//            tile as it completes, from the rank that computes it first to itself (ring order, §4.1),
//            reading the partials through NVLink (pull mode): C = P_(d-1) + P_(d-2) + ... + P_d, one
//            rank's tile at a time. After the GEMM only its last communication tile remains. Where
//            a rank's rows do not start on the GEMM's tile grid, the GEMM tile rows holding two
//            ranks' rows run first and count locally, and each rank's companion relays "stored" to
//            the owners they touch before its reductions.
//   ag_moe:  the tokens travel as ag_gemm's A (companion pulls, own shard first, then ring or
//            all-to-all order); as soon as a source rank's tokens are in, its rows are gathered into
//            the expert-grouped layout and its grouped GEMM runs (a GEMM per expert it picked), so
//            each source's experts compute while the next source's tokens arrive. The mapping from
//            tokens to rows (the dynamic mapping of §4.2) is built from the routing with the plan.
//   moe_rs:  every rank computes the source blocks in ring order after its own (grouped GEMM, then
//            the top-k weighted reduction of the block's rows to its tokens) and counts each block on
//            its owner, whose companion reduces the block from every rank as it completes (pull mode,
//            as gemm_rs); the last block's reduction is all that remains after the GEMMs.
//   ag_attention: one attention step whose KV tiles wait for the copy-engine pulls of their rows
//            (§5.3; attention.cpp).
#include <algorithm>
#include <stdexcept>

#include "attention.hpp"
#include "builder_support.hpp"
#include "moe_support.hpp"
#include "weft/model/tiling.hpp"
#include "weft/ir/tile_map.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kComm = 1;
constexpr int kCompanion = 0;

int gemm_sms(const PlanOptions& o) {
  const int sms = o.machine.sm_count - o.tilelink.comm_sms;
  if (o.tilelink.comm_sms < 1 || sms < 1)
    throw std::invalid_argument("tilelink: comm_sms must be between 1 and " + std::to_string(o.machine.sm_count - 1) + " (the machine has " +
                                std::to_string(o.machine.sm_count) + " SMs), got " + std::to_string(o.tilelink.comm_sms));
  return sms;
}

int64_t comm_tile_rows(const PlanOptions& o, int64_t rows_per_rank) {
  const int64_t rows = o.tilelink.comm_tile_rows > 0 ? o.tilelink.comm_tile_rows : choose_comm_tile_rows(rows_per_rank, o.tile_m);
  if (rows < 1) throw std::invalid_argument("tilelink: comm_tile_rows must be positive, got " + std::to_string(rows));
  return std::min(rows, std::max<int64_t>(rows_per_rank, 1));
}

void build_ag_gemm(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const detail::AllGatherOperands operands = detail::declare_all_gather_operands(p, b);
  const BufferId a = operands.a, w = operands.b, gathered = operands.gathered, c = operands.c;
  const SignalId arrived = b.signal("comm_tiles_arrived");
  const tile::StaticTileMap map{world, p.m, comm_tile_rows(o, p.m)};
  const int channels = map.channels();

  // Communication tiles in the order the companion moves them: the own shard, then the peers.
  std::vector<int> order;
  for (int ch = 0; ch < channels; ++ch) order.push_back(r * channels + ch);
  if (o.tilelink.ring) {
    for (int i = 1; i < world; ++i)
      for (int ch = 0; ch < channels; ++ch) order.push_back(((r + i) % world) * channels + ch);
  } else {
    for (int ch = 0; ch < channels; ++ch)
      for (int i = 1; i < world; ++i) order.push_back(((r + i) % world) * channels + ch);
  }
  std::vector<uint64_t> arrived_after(static_cast<size_t>(map.tiles()), 0);  // the counter's value once a tile is in
  for (size_t k = 0; k < order.size(); ++k) {
    const tile::TileCoord t = map(order[k]);
    arrived_after[static_cast<size_t>(order[k])] = k + 1;
    const int64_t first = t.row - static_cast<int64_t>(t.rank) * p.m;  // within the source's shard
    CopyStep move{b.rows(a, first, t.rows, t.rank), b.rows(gathered, t.row, t.rows), o.tilelink.comm_sms};
    Step& step = b.add((t.rank == r ? "copy own tile " : "pull rank " + std::to_string(t.rank) + " tile ") + std::to_string(t.channel), kComm,
                       Engine::sm, std::move(move));
    step.companion = kCompanion;
    step.notifies.push_back({b.own(arrived), 1});
  }

  b.set_gathered_a({b.whole(gathered)});  // the companion copies the own shard in too

  GemmStep gemm = detail::gemm_over(b.whole(gathered), b.whole(w), o);
  gemm.sm_limit = gemm_sms(o);
  gemm.tail_splits = 1;  // the companion keeps SMs: no wave to fill
  gemm.stream_k = false;
  const TileGrid grid{world * p.m, p.n, o.tile_m, o.tile_n};
  for (int64_t index : rasterized_order(grid, o.raster, o.swizzle)) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = b.at(c, tile.tile);
    uint64_t wait = 0;
    for (int id = map.tile_of_row(tile.tile.row); id <= map.tile_of_row(tile.tile.row_end() - 1); ++id)
      wait = std::max(wait, arrived_after[static_cast<size_t>(id)]);
    tile.wait = Wait{b.own(arrived), wait};
    gemm.tiles.push_back(tile);
  }
  std::stable_sort(gemm.tiles.begin(), gemm.tiles.end(), [](const GemmTile& x, const GemmTile& y) { return x.wait->value < y.wait->value; });
  b.add("gemm (tiles wait for their communication tiles)", kCompute, Engine::sm, std::move(gemm));
  b.set_output(b.whole(c));
}

void build_gemm_rs(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const int64_t share = p.m / world;
  // Communication tiles of whole GEMM tile rows where ranks' rows start on the GEMM's tile grid;
  // else one per rank, and the GEMM tile rows that hold two ranks' rows are relayed (below).
  const bool aligned = share % o.tile_m == 0;
  const int64_t rows_per_tile =
      aligned ? std::max<int64_t>(o.tile_m, comm_tile_rows(o, share) / o.tile_m * o.tile_m) : std::max<int64_t>(share, 1);
  const tile::StaticTileMap map{world, share, rows_per_tile};
  const int channels = map.channels();
  const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
  auto spans = [&](const Rect& t) { return map.tile_of_row(t.row) != map.tile_of_row(t.row_end() - 1); };
  int64_t spanning_tiles = 0;
  std::vector<bool> channel_spanned(static_cast<size_t>(channels), false);  // this rank's tiles that spanning GEMM tiles touch
  std::vector<bool> owner_spanned(static_cast<size_t>(world), false);
  for (int64_t index = 0; index < grid.count(); ++index) {
    const Rect t = grid.tile(index);
    if (!spans(t)) continue;
    ++spanning_tiles;
    for (int id = map.tile_of_row(t.row); id <= map.tile_of_row(t.row_end() - 1); ++id) {
      owner_spanned[static_cast<size_t>(id / channels)] = true;
      if (id / channels == b.rank()) channel_spanned[static_cast<size_t>(id % channels)] = true;
    }
  }

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId partial = b.buffer("partial", BufferRole::scratch, p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, share, p.n, p.output_dtype);
  // A counter per (computing rank, communication tile): GEMM tiles finish in any order, so a count
  // says which tiles are in only when it counts one communication tile's.
  std::vector<SignalId> tiles_from(static_cast<size_t>(world) * static_cast<size_t>(channels));
  auto counter = [&](int q, int ch) { return tiles_from[static_cast<size_t>(q) * static_cast<size_t>(channels) + static_cast<size_t>(ch)]; };
  for (int q = 0; q < world; ++q)
    for (int ch = 0; ch < channels; ++ch)
      tiles_from[static_cast<size_t>(q * channels + ch)] = b.signal("tile" + std::to_string(ch) + "_from_rank" + std::to_string(q));
  // GEMM tiles whose rows belong to two communication tiles count locally; the rank's companion
  // relays "all of them stored" to every owner they touch.
  SignalId spanning_stored = -1;
  std::vector<SignalId> spanning_from;
  if (spanning_tiles > 0) {
    spanning_stored = b.signal("spanning_tiles_stored");
    for (int q = 0; q < world; ++q) spanning_from.push_back(b.signal("spanning_tiles_from_rank" + std::to_string(q)));
  }

  // GEMM tiles: blocks in ring order after the own one, communication tiles in turn within a block.
  GemmStep gemm = detail::gemm_over(b.whole(a), b.whole(w), o);
  gemm.sm_limit = gemm_sms(o);
  gemm.tail_splits = 1;  // the companion keeps SMs: no wave to fill
  gemm.stream_k = false;
  std::vector<int64_t> order = rasterized_order(grid, o.raster, o.swizzle);
  auto rank_of_step = [&](int64_t index) {  // spanning tiles first: their relay waits for all of them
    const Rect t = grid.tile(index);
    const int id = map.tile_of_row(t.row);
    return std::make_tuple(!spans(t), (id / channels - r - 1 + world) % world, id % channels);
  };
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return rank_of_step(x) < rank_of_step(y); });
  std::vector<uint64_t> tiles_in_channel(static_cast<size_t>(channels), 0);
  for (int64_t index : order) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = b.at(partial, tile.tile);
    const int id = map.tile_of_row(tile.tile.row);
    const int owner = id / channels;
    if (spans(tile.tile)) {
      tile.notify = Notify{b.own(spanning_stored), 1};
    } else {
      tile.notify = Notify{b.signal_on(counter(r, id % channels), owner), 1};
      if (owner == r) ++tiles_in_channel[static_cast<size_t>(id % channels)];  // the same on every rank: the grid is
    }
    gemm.tiles.push_back(tile);
  }
  b.add("gemm (tiles counted on their rows' owner)", kCompute, Engine::sm, std::move(gemm));

  // The companion: the relay first, then this rank's rows, from the rank that computes them first
  // (r - 1) to itself.
  if (spanning_tiles > 0) {
    Step& relay = b.add("relay: spanning tiles stored", kComm, Engine::sm, JoinStep{});
    relay.companion = kCompanion;
    relay.waits.push_back({b.own(spanning_stored), static_cast<uint64_t>(spanning_tiles)});
    for (int d = 0; d < world; ++d)
      if (owner_spanned[static_cast<size_t>(d)]) relay.notifies.push_back({b.signal_on(spanning_from[static_cast<size_t>(r)], d), 1});
  }
  for (int j = 0; j < world; ++j) {
    const int q = (r - 1 - j + 2 * world) % world;
    for (int ch = 0; ch < channels; ++ch) {
      const tile::TileCoord t = map(r * channels + ch);
      ReduceStep sum{{b.rows(partial, t.row, t.rows, q)}, b.rows(c, t.row - static_cast<int64_t>(r) * share, t.rows), /*accumulate=*/j > 0,
                     o.tilelink.comm_sms};
      Step& step = b.add("reduce tile " + std::to_string(ch) + " from rank " + std::to_string(q), kComm, Engine::sm, std::move(sum));
      step.companion = kCompanion;
      if (tiles_in_channel[static_cast<size_t>(ch)] > 0) step.waits.push_back({b.own(counter(q, ch)), tiles_in_channel[static_cast<size_t>(ch)]});
      if (channel_spanned[static_cast<size_t>(ch)]) step.waits.push_back({b.own(spanning_from[static_cast<size_t>(q)]), 1});
    }
  }
  b.set_output(b.whole(c));
}

void build_ag_moe(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const MoeRows rows = moe_rows(p);
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId w = detail::declare_b(b, p);
  const BufferId gathered = b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype);
  const BufferId x = b.buffer("X", BufferRole::scratch, rows.rows(), p.k, p.input_dtype);
  const BufferId c = b.buffer("C", BufferRole::output, rows.rows(), p.n, p.output_dtype);
  const SignalId arrived = b.signal("token_tiles_arrived");
  const tile::StaticTileMap map{world, p.m, comm_tile_rows(o, p.m)};
  const int channels = map.channels();
  std::vector<int> order;  // as ag_gemm: the own tokens, then the peers'
  for (int ch = 0; ch < channels; ++ch) order.push_back(r * channels + ch);
  for (int i = 1; i < world; ++i)
    for (int ch = 0; ch < channels; ++ch) order.push_back(((r + i) % world) * channels + ch);
  if (!o.tilelink.ring) {
    order.resize(static_cast<size_t>(channels));
    for (int ch = 0; ch < channels; ++ch)
      for (int i = 1; i < world; ++i) order.push_back(((r + i) % world) * channels + ch);
  }
  std::vector<uint64_t> source_in(static_cast<size_t>(world), 0);  // the counter once all of a source's tiles are in
  for (size_t k = 0; k < order.size(); ++k) {
    const tile::TileCoord t = map(order[k]);
    source_in[static_cast<size_t>(t.rank)] = k + 1;
    CopyStep move{b.rows(a, t.row - static_cast<int64_t>(t.rank) * p.m, t.rows, t.rank), b.rows(gathered, t.row, t.rows), o.tilelink.comm_sms};
    Step& step = b.add((t.rank == r ? "copy own tokens " : "pull rank " + std::to_string(t.rank) + " tokens ") + std::to_string(t.channel), kComm,
                       Engine::sm, std::move(move));
    step.companion = kCompanion;
    step.notifies.push_back({b.own(arrived), 1});
  }
  // Sources in the order their tokens complete.
  std::vector<int> sources(static_cast<size_t>(world));
  for (int s = 0; s < world; ++s) sources[static_cast<size_t>(s)] = s;
  std::stable_sort(sources.begin(), sources.end(), [&](int x1, int x2) { return source_in[static_cast<size_t>(x1)] < source_in[static_cast<size_t>(x2)]; });
  for (int s : sources) {
    Step& gather = b.add("gather rank " + std::to_string(s) + "'s rows by expert", kCompute, Engine::sm,
                         detail::gather_block(p, rows, s, b.rows(gathered, s * p.m, p.m), b.rows(x, rows.source_first(s), rows.source_rows(s))));
    gather.waits.push_back({b.own(arrived), source_in[static_cast<size_t>(s)]});
    detail::add_expert_gemms(b, p, rows, s, x, w, c, o, kCompute);
  }
  b.set_output(b.whole(c));
}

void build_moe_rs(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const MoeRows rows = moe_rows(p);
  const BufferId a = b.buffer("A", BufferRole::input, a_rows(p), p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId weights = b.buffer("topk_weights", BufferRole::input, world * p.m, p.topk, topk_weights_dtype(p));
  const BufferId partial = b.buffer("P", BufferRole::scratch, rows.rows(), p.n, p.output_dtype);
  const BufferId tokens = b.buffer("Z", BufferRole::scratch, world * p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
  std::vector<SignalId> block_from;
  for (int q = 0; q < world; ++q) block_from.push_back(b.signal("tokens_from_rank" + std::to_string(q)));
  for (int i = 1; i <= world; ++i) {
    const int s = (r + i) % world;  // ring order after the own block, which comes last
    detail::add_expert_gemms(b, p, rows, s, a, w, partial, o, kCompute);
    Step& combine = b.add("top-k reduce rank " + std::to_string(s) + "'s tokens", kCompute, Engine::sm,
                          detail::combine_block(p, rows, s, b.rows(partial, rows.source_first(s), rows.source_rows(s)), b.rows(weights, s * p.m, p.m),
                                                b.rows(tokens, s * p.m, p.m)));
    combine.notifies.push_back({b.signal_on(block_from[static_cast<size_t>(r)], s), 1});
  }
  for (int j = 0; j < world; ++j) {
    const int q = (r - 1 - j + 2 * world) % world;
    ReduceStep sum{{b.rows(tokens, r * p.m, p.m, q)}, b.whole(c), /*accumulate=*/j > 0, o.tilelink.comm_sms};
    Step& step = b.add("reduce my tokens from rank " + std::to_string(q), kComm, Engine::sm, std::move(sum));
    step.companion = kCompanion;
    step.waits.push_back({b.own(block_from[static_cast<size_t>(q)]), 1});
  }
  b.set_output(b.whole(c));
}

}  // namespace

Plan plan_tilelink(const Problem& p, const PlanOptions& options) {
  check_problem(p);
  if (p.op != OpKind::ag_gemm && p.op != OpKind::gemm_rs && !is_moe(p.op) && !is_attention(p.op))
    throw std::invalid_argument("tilelink plans are built for ag_gemm, gemm_rs, ag_moe, moe_rs and ag_attention, not " + std::string(to_string(p.op)));
  Plan plan;
  plan.strategy = "tilelink";
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    RankPlanBuilder b(r, 2);
    if (p.op == OpKind::ag_gemm) build_ag_gemm(p, options, b);
    else if (p.op == OpKind::gemm_rs) build_gemm_rs(p, options, b);
    else if (p.op == OpKind::ag_moe) build_ag_moe(p, options, b);
    else if (is_attention(p.op)) detail::build_attention_tile_waits(p, options, b);
    else build_moe_rs(p, options, b);
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
