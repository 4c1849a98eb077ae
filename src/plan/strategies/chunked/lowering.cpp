// Lowering a chunk schedule to a plan (plan/chunked.hpp says what each rank gets).
#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

#include "../builder_support.hpp"
#include "weft/plan/chunked.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;

using OpKey = std::pair<int, int>;  // (rank, index)

// What every rank needs to know about every other before any rank's plan is built: the signals of
// each rank (peers raise them), which operation fills which rows, and when chunks arrive.
struct Layout {
  const Problem& p;
  const Schedule& s;
  int tile_m = 128;
  int64_t tiles_n = 1;
  int64_t blocks = 0;  // row blocks (tile_m rows) of the logical tensor

  std::vector<std::map<std::string, SignalId>> signals;  // per rank: key -> id (declaration order = id)
  std::vector<std::vector<std::string>> signal_names;
  std::map<OpKey, std::vector<OpKey>> dependents;        // op -> operations that list it in `after`
  std::map<OpKey, int> estimate;                         // unit-step completion estimate
  // ag_gemm: writers[d][b] = operations that bring rows of block b to rank d.
  std::vector<std::vector<std::vector<OpKey>>> writers;

  Layout(const Problem& problem, const Schedule& schedule, const PlanOptions& o) : p(problem), s(schedule) {
    tile_m = o.tile_m;
    tiles_n = (p.n + o.tile_n - 1) / o.tile_n;
    blocks = (schedule_rows(p) + tile_m - 1) / tile_m;
    const int world = p.world_size;
    signals.resize(static_cast<size_t>(world));
    signal_names.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < static_cast<int>(ops(r).size()); ++i)
        for (const ChunkRef& d : ops(r)[static_cast<size_t>(i)].after) dependents[{d.rank, d.index}].push_back({r, i});
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < static_cast<int>(ops(r).size()); ++i) estimate_of({r, i});
  }

  const std::vector<ChunkOp>& ops(int r) const { return s.ranks[static_cast<size_t>(r)]; }
  const ChunkOp& op(OpKey k) const { return ops(k.first)[static_cast<size_t>(k.second)]; }
  // The rank whose memory the operation's rows land in.
  int receiver(OpKey k) const { return op(k).kind == ChunkOpKind::push ? op(k).peer : k.first; }
  int64_t first_block(int64_t row) const { return row / tile_m; }
  int64_t end_block(int64_t row, int64_t rows) const { return (row + rows + tile_m - 1) / tile_m; }
  std::pair<int, int> stream_key(const ChunkOp& o) const {
    return {static_cast<int>(o.backend), o.kind == ChunkOpKind::collective ? -1 : o.peer};
  }

  // When an operation's rows are expected, for ordering tiles: its estimate, ties broken by its
  // issue order (concurrent streams share the links, so earlier-issued chunks tend to land first).
  int64_t arrival_key(OpKey k) const { return static_cast<int64_t>(estimate.at(k)) * (int64_t{1} << 20) + k.second; }

  int estimate_of(OpKey k) {
    if (const auto it = estimate.find(k); it != estimate.end()) return it->second;
    int start = 0;
    for (const ChunkRef& d : op(k).after) start = std::max(start, estimate_of({d.rank, d.index}));
    for (int j = k.second - 1; j >= 0; --j)
      if (stream_key(ops(k.first)[static_cast<size_t>(j)]) == stream_key(op(k))) {
        start = std::max(start, estimate_of({k.first, j}));
        break;
      }
    return estimate[k] = start + 1;
  }

  SignalId declare(int rank, const std::string& key) {
    auto& ids = signals[static_cast<size_t>(rank)];
    if (const auto it = ids.find(key); it != ids.end()) return it->second;
    signal_names[static_cast<size_t>(rank)].push_back(key);
    return ids[key] = static_cast<SignalId>(ids.size());
  }
  SignalId id(int rank, const std::string& key) const { return signals[static_cast<size_t>(rank)].at(key); }
};

std::string op_name(OpKey k) { return std::to_string(k.first) + "_" + std::to_string(k.second); }
std::string done_key(OpKey k) { return "op_" + op_name(k) + "_done"; }
std::string after_key(OpKey k) { return "after_op_" + op_name(k); }
std::string ready_key(int index) { return "op_" + std::to_string(index) + "_rows_ready"; }
std::string block_key(const Layout& l, int64_t b) {
  return (l.p.op == OpKind::ag_gemm ? "rows_" : "tiles_of_rows_") + std::to_string(b * l.tile_m) + (l.p.op == OpKind::ag_gemm ? "_arrived" : "");
}

// Declares every rank's signals, in one order all ranks agree on.
void declare_signals(Layout& l) {
  const int world = l.p.world_size;
  const OpKind op = l.p.op;
  if (op == OpKind::ag_gemm) {
    l.writers.assign(static_cast<size_t>(world), std::vector<std::vector<OpKey>>(static_cast<size_t>(l.blocks)));
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
        const ChunkOp& o = l.ops(r)[static_cast<size_t>(i)];
        const int d = l.receiver({r, i});
        for (int64_t b = l.first_block(o.row); b < l.end_block(o.row, o.rows); ++b) l.writers[static_cast<size_t>(d)][static_cast<size_t>(b)].push_back({r, i});
      }
  }
  for (int d = 0; d < world; ++d) {
    for (int64_t b = 0; b < l.blocks; ++b)
      if (op != OpKind::ag_gemm || !l.writers[static_cast<size_t>(d)][static_cast<size_t>(b)].empty()) l.declare(d, block_key(l, b));
  }
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
      const OpKey k{r, i};
      const ChunkOp& o = l.op(k);
      if (o.kind == ChunkOpKind::collective) continue;
      const int d = l.receiver(k);
      // ag_gemm: a done counter where a block has several writers (a join step raises the block);
      // gemm_rs: every arrival, for the sums.
      bool needs_done = op == OpKind::gemm_rs;
      if (op == OpKind::ag_gemm)
        for (int64_t b = l.first_block(o.row); b < l.end_block(o.row, o.rows); ++b)
          needs_done = needs_done || l.writers[static_cast<size_t>(d)][static_cast<size_t>(b)].size() > 1;
      if (needs_done) l.declare(d, done_key(k));
      if (op == OpKind::gemm_rs && o.kind == ChunkOpKind::pull) l.declare(r, ready_key(i));
    }
  for (const auto& [k, deps] : l.dependents)
    for (const OpKey& dep : deps) l.declare(dep.first, after_key(k));
}

// The streams of one rank: 0 the GEMM, then one per (backend, peer) of its operations in order of
// first use, then a join stream, then (gemm_rs) the sums.
struct Streams {
  std::map<std::pair<int, int>, int> of_key;
  int join = 0;
  int sums = -1;
  int count = 1;
};

Streams streams_of(const Layout& l, int r) {
  Streams st;
  for (const ChunkOp& o : l.ops(r))
    if (!st.of_key.count(l.stream_key(o))) st.of_key[l.stream_key(o)] = st.count++;
  st.join = st.count++;
  if (l.p.op == OpKind::gemm_rs) st.sums = st.count++;
  return st;
}

// The notifies every operation raises once done: its dependents' counters, and for an arrival its
// receiver's block (sole writer) or done counter.
void add_completion(const Layout& l, OpKey k, const RankPlanBuilder& b, Step& step) {
  std::vector<int> told;
  for (const OpKey& dep : l.dependents.count(k) ? l.dependents.at(k) : std::vector<OpKey>{})
    if (std::find(told.begin(), told.end(), dep.first) == told.end()) {
      told.push_back(dep.first);
      step.notifies.push_back({b.signal_on(l.id(dep.first, after_key(k)), dep.first), 1});
    }
  const ChunkOp& o = l.op(k);
  if (o.kind == ChunkOpKind::collective) return;
  const int d = l.receiver(k);
  if (l.signals[static_cast<size_t>(d)].count(done_key(k))) step.notifies.push_back({b.signal_on(l.id(d, done_key(k)), d), 1});
  if (l.p.op == OpKind::ag_gemm)
    for (int64_t blk = l.first_block(o.row); blk < l.end_block(o.row, o.rows); ++blk)
      if (l.writers[static_cast<size_t>(d)][static_cast<size_t>(blk)].size() == 1)
        step.notifies.push_back({b.signal_on(l.id(d, block_key(l, blk)), d), 1});
}

void add_dependencies(const Layout& l, OpKey k, const RankPlanBuilder& b, Step& step) {
  for (const ChunkRef& d : l.op(k).after) step.waits.push_back({b.own(l.id(k.first, after_key({d.rank, d.index}))), 1});
}

Engine engine_of(const ChunkOp& o) {
  switch (o.backend) {
    case ChunkBackend::copy_engine: return Engine::copy_engine;
    case ChunkBackend::sm: return Engine::sm;
    case ChunkBackend::nccl: return Engine::nccl;
  }
  return Engine::copy_engine;
}

// An SM copy runs on the SMs the GEMM leaves it.
int copy_sms(const PlanOptions& o, const ChunkOp& op) { return op.backend == ChunkBackend::sm ? o.chunked.comm_sms : 0; }

bool uses_sm_copies(const Schedule& s) {
  for (const auto& ops : s.ranks)
    for (const ChunkOp& o : ops)
      if (o.backend == ChunkBackend::sm) return true;
  return false;
}

// The GEMM's tiles in the order of `rank_of_block` (stable over the raster, so tiles of one chunk
// keep their locality), each with its wait and its store.
std::vector<int64_t> tile_order(const TileGrid& grid, const PlanOptions& o, const std::function<int64_t(int64_t block)>& rank_of_block) {
  auto order = rasterized_order(grid, o.raster, o.swizzle);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return rank_of_block(grid.tile(x).row / grid.tile_m) < rank_of_block(grid.tile(y).row / grid.tile_m); });
  return order;
}

// The GEMM's tiles in `order`, each stored at its own place in `into` and counted on its row
// block's signal of rank r (whose communication waits for the block's whole row of tiles).
void add_tiles_counted_per_block(GemmStep& gemm, const Layout& l, int r, const RankPlanBuilder& b, const TileGrid& grid,
                                 const std::vector<int64_t>& order, BufferId into) {
  for (int64_t index : order) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = b.at(into, tile.tile);
    tile.notify = Notify{b.own(l.id(r, block_key(l, tile.tile.row / l.tile_m))), 1};
    gemm.tiles.push_back(tile);
  }
}

void build_ag_gemm(const Layout& l, const PlanOptions& o, int r, RankPlanBuilder& b, const Streams& st) {
  const Problem& p = l.p;
  const int world = p.world_size;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId w = detail::declare_b(b, p);
  const BufferId gathered = b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, world * p.m, p.n, p.output_dtype);
  // The own shard into place on the GEMM's stream, before the GEMM: its tiles need no wait.
  b.add("copy own shard", kCompute, Engine::sm, CopyStep{b.whole(a), b.rows(gathered, r * p.m, p.m)});
  b.set_gathered_a({b.whole(gathered)});
  for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
    const OpKey k{r, i};
    const ChunkOp& op = l.op(k);
    const int stream = st.of_key.at(l.stream_key(op));
    // Rows of a rank's own shard are read from its A (its gathered copy is made at its call's start);
    // relayed rows from its gathered A. A push writes the receiver's gathered A.
    const int holder = op.kind == ChunkOpKind::pull ? op.peer : r;
    const int d = l.receiver(k);
    std::vector<std::pair<int64_t, int64_t>> parts;  // [first, end) cut at the holder's shard
    const int64_t own_first = holder * p.m, own_end = own_first + p.m;
    for (int64_t row = op.row; row < op.row + op.rows;) {
      const int64_t end = row < own_first ? std::min(op.row + op.rows, own_first)
                                          : row < own_end ? std::min(op.row + op.rows, own_end) : op.row + op.rows;
      parts.push_back({row, end});
      row = end;
    }
    for (size_t part = 0; part < parts.size(); ++part) {
      const auto [first, end] = parts[part];
      const bool own = first >= own_first && end <= own_end;
      const Region from = own ? b.rows(a, first - own_first, end - first, holder) : b.rows(gathered, first, end - first, holder);
      Step& step = b.add(std::string(to_string(op.kind)) + " rows " + std::to_string(first) + ".." + std::to_string(end) +
                             (op.kind == ChunkOpKind::pull ? " from rank " : " to rank ") + std::to_string(op.peer),
                         stream, engine_of(op), CopyStep{from, b.rows(gathered, first, end - first, d), copy_sms(o, op)});
      if (part == 0) add_dependencies(l, k, b, step);
      if (part + 1 == parts.size()) add_completion(l, k, b, step);
    }
  }
  // Blocks several operations fill: raised once all have landed, by a join step of the receiver.
  for (int64_t blk = 0; blk < l.blocks; ++blk) {
    const auto& who = l.writers[static_cast<size_t>(r)][static_cast<size_t>(blk)];
    if (who.size() < 2) continue;
    Step& join = b.add("rows " + std::to_string(blk * l.tile_m) + " arrived", st.join, Engine::sm, JoinStep{});
    for (const OpKey& k : who) join.waits.push_back({b.own(l.id(r, done_key(k))), 1});
    join.notifies.push_back({b.own(l.id(r, block_key(l, blk))), 1});
  }
  GemmStep gemm = detail::gemm_over(b.whole(gathered), b.whole(w), o);
  if (uses_sm_copies(l.s)) {
    gemm.sm_limit = o.machine.sm_count - o.chunked.comm_sms;
    gemm.k_splits = 1;
    gemm.tail_splits = 1;
    gemm.stream_k = false;
  }
  const TileGrid grid{world * p.m, p.n, o.tile_m, o.tile_n};
  // Estimated arrival of a block: the latest of its writers (own rows: at once).
  auto arrival = [&](int64_t blk) {
    int64_t latest = 0;
    for (const OpKey& k : l.writers[static_cast<size_t>(r)][static_cast<size_t>(blk)]) latest = std::max<int64_t>(latest, l.arrival_key(k));
    return latest;
  };
  for (int64_t index : tile_order(grid, o, arrival)) {
    GemmTile tile;
    tile.tile = grid.tile(index);
    tile.store = b.at(c, tile.tile);
    const int64_t blk = tile.tile.row / l.tile_m;
    if (!l.writers[static_cast<size_t>(r)][static_cast<size_t>(blk)].empty()) tile.wait = Wait{b.own(l.id(r, block_key(l, blk))), 1};
    gemm.tiles.push_back(tile);
  }
  b.add("gemm (tiles follow chunk arrival)", kCompute, Engine::sm, std::move(gemm));
  b.set_output(b.whole(c));
}

void build_gemm_rs(const Layout& l, const PlanOptions& o, int r, RankPlanBuilder& b, const Streams& st) {
  const Problem& p = l.p;
  const int world = p.world_size;
  const int64_t block = p.m / world;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId received = b.buffer("received", BufferRole::scratch, world * block, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, block, p.n, p.output_dtype);
  const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
  // Every row block holds a whole row of tiles.
  auto wait_for_rows = [&](Step& step, int64_t row, int64_t rows) {
    for (int64_t blk = l.first_block(row); blk < l.end_block(row, rows); ++blk)
      step.waits.push_back({b.own(l.id(r, block_key(l, blk))), static_cast<uint64_t>(l.tiles_n)});
  };

  // The GEMM first: every tile to the local partial product, counted per row block; rows that
  // leave early run first, the own block last.
  GemmStep gemm = detail::gemm_over(b.whole(a), b.whole(w), o);
  if (uses_sm_copies(l.s)) {
    gemm.sm_limit = o.machine.sm_count - o.chunked.comm_sms;
    gemm.k_splits = 1;
    gemm.tail_splits = 1;
    gemm.stream_k = false;
  }
  std::vector<int64_t> departure(static_cast<size_t>(l.blocks), INT64_MAX);
  for (int q = 0; q < world; ++q)
    for (int i = 0; i < static_cast<int>(l.ops(q).size()); ++i) {
      const ChunkOp& op = l.ops(q)[static_cast<size_t>(i)];
      const int sender = op.kind == ChunkOpKind::push ? q : op.peer;
      if (sender != r) continue;
      for (int64_t blk = l.first_block(op.row); blk < l.end_block(op.row, op.rows); ++blk)
        departure[static_cast<size_t>(blk)] = std::min<int64_t>(departure[static_cast<size_t>(blk)], l.arrival_key({q, i}));
    }
  add_tiles_counted_per_block(gemm, l, r, b, grid, tile_order(grid, o, [&](int64_t blk) { return departure[static_cast<size_t>(blk)]; }), partial);
  b.add("gemm (tiles of rows that leave first, first)", kCompute, Engine::sm, std::move(gemm));

  // This rank's operations: pushes of its rows, pulls of its block's rows from peers.
  for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
    const OpKey k{r, i};
    const ChunkOp& op = l.op(k);
    const int stream = st.of_key.at(l.stream_key(op));
    const int sender = op.kind == ChunkOpKind::push ? r : op.peer;
    const int d = l.receiver(k);
    const Region from = b.rows(partial, op.row, op.rows, sender);
    const Region to = b.rows(received, sender * block + op.row - d * block, op.rows, d);
    Step& step = b.add(std::string(to_string(op.kind)) + " rows " + std::to_string(op.row) + ".." + std::to_string(op.row + op.rows) +
                           (op.kind == ChunkOpKind::pull ? " from rank " : " to rank ") + std::to_string(op.peer),
                       stream, engine_of(op), CopyStep{from, to, copy_sms(o, op)});
    if (op.kind == ChunkOpKind::push) wait_for_rows(step, op.row, op.rows);
    else step.waits.push_back({b.own(l.id(r, ready_key(i))), 1});
    add_dependencies(l, k, b, step);
    add_completion(l, k, b, step);
  }
  // Peers' pulls of this rank's rows: tell each puller once its rows are stored.
  for (int q = 0; q < world; ++q)
    for (int i = 0; i < static_cast<int>(l.ops(q).size()); ++i) {
      const ChunkOp& op = l.ops(q)[static_cast<size_t>(i)];
      if (op.kind != ChunkOpKind::pull || op.peer != r) continue;
      Step& ready = b.add("rows " + std::to_string(op.row) + ".." + std::to_string(op.row + op.rows) + " ready for rank " + std::to_string(q),
                          st.join, Engine::sm, JoinStep{});
      wait_for_rows(ready, op.row, op.rows);
      ready.notifies.push_back({b.signal_on(l.id(q, ready_key(i)), q), 1});
    }

  // The sums, one per segment of this rank's block between arrivals' boundaries, each as soon as
  // its chunks and its own rows are in.
  std::vector<int64_t> cuts{r * block, (r + 1) * block};
  std::vector<OpKey> arriving;
  for (int q = 0; q < world; ++q)
    for (int i = 0; i < static_cast<int>(l.ops(q).size()); ++i)
      if (l.receiver({q, i}) == r) {
        arriving.push_back({q, i});
        cuts.push_back(l.op({q, i}).row);
        cuts.push_back(l.op({q, i}).row + l.op({q, i}).rows);
      }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    const int64_t first = cuts[s], rows = cuts[s + 1] - cuts[s];
    ReduceStep sum;
    sum.srcs.push_back(b.rows(partial, first, rows));
    for (int q = 0; q < world; ++q)
      if (q != r) sum.srcs.push_back(b.rows(received, q * block + first - r * block, rows));
    sum.dst = b.rows(c, first - r * block, rows);
    Step& step = b.add("sum rows " + std::to_string(first) + ".." + std::to_string(first + rows), st.sums, Engine::sm, std::move(sum));
    wait_for_rows(step, first, rows);
    for (const OpKey& k : arriving) {
      const ChunkOp& op = l.op(k);
      if (op.row < first + rows && first < op.row + op.rows) step.waits.push_back({b.own(l.id(r, done_key(k))), 1});
    }
  }
  b.set_output(b.whole(c));
}

void build_gemm_ar(const Layout& l, const PlanOptions& o, int r, RankPlanBuilder& b, const Streams& st) {
  const Problem& p = l.p;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
  const TileGrid grid{p.m, p.n, o.tile_m, o.tile_n};
  GemmStep gemm = detail::gemm_over(b.whole(a), b.whole(w), o);
  // NCCL's kernels run beside the GEMM: the GEMM keeps the SMs they leave it.
  gemm.sm_limit = o.gemm_sms > 0 ? o.gemm_sms : o.machine.sm_count - o.machine.collective_sms;
  gemm.k_splits = 1;
  gemm.tail_splits = 1;
  gemm.stream_k = false;
  std::vector<int64_t> first_use(static_cast<size_t>(l.blocks), INT64_MAX);
  for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
    const ChunkOp& op = l.ops(r)[static_cast<size_t>(i)];
    for (int64_t blk = l.first_block(op.row); blk < l.end_block(op.row, op.rows); ++blk)
      first_use[static_cast<size_t>(blk)] = std::min<int64_t>(first_use[static_cast<size_t>(blk)], i);
  }
  add_tiles_counted_per_block(gemm, l, r, b, grid, tile_order(grid, o, [&](int64_t blk) { return first_use[static_cast<size_t>(blk)]; }), c);
  b.add("gemm (tiles of the first chunks first)", kCompute, Engine::sm, std::move(gemm));
  for (int i = 0; i < static_cast<int>(l.ops(r).size()); ++i) {
    const OpKey k{r, i};
    const ChunkOp& op = l.op(k);
    Step& step = b.add("all_reduce rows " + std::to_string(op.row) + ".." + std::to_string(op.row + op.rows), st.of_key.at(l.stream_key(op)),
                       Engine::nccl, CollectiveStep{CollectiveKind::all_reduce, i, b.rows(c, op.row, op.rows), b.rows(c, op.row, op.rows), {}, {}});
    for (int64_t blk = l.first_block(op.row); blk < l.end_block(op.row, op.rows); ++blk)
      step.waits.push_back({b.own(l.id(r, block_key(l, blk))), static_cast<uint64_t>(l.tiles_n)});
    add_dependencies(l, k, b, step);
    add_completion(l, k, b, step);
  }
  b.set_output(b.whole(c));
}

}  // namespace

Plan lower_schedule(const Problem& p, const Schedule& s, const PlanOptions& o) {
  check_problem(p);
  check_schedule(p, s);
  if (o.chunked.comm_sms < 1 || o.chunked.comm_sms >= o.machine.sm_count)
    throw std::invalid_argument("chunked: comm_sms must be 1.." + std::to_string(o.machine.sm_count - 1) + ", got " + std::to_string(o.chunked.comm_sms));
  Layout l(p, s, o);
  declare_signals(l);
  Plan plan;
  plan.strategy = "chunked";
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    const Streams st = streams_of(l, r);
    RankPlanBuilder b(r, st.count);
    for (const std::string& name : l.signal_names[static_cast<size_t>(r)]) b.signal(name);
    switch (p.op) {
      case OpKind::ag_gemm: build_ag_gemm(l, o, r, b, st); break;
      case OpKind::gemm_rs: build_gemm_rs(l, o, r, b, st); break;
      case OpKind::gemm_ar: build_gemm_ar(l, o, r, b, st); break;
      default: throw std::invalid_argument("chunked: no lowering for " + std::string(to_string(p.op)));
    }
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

Plan plan_chunked(const Problem& p, const PlanOptions& o) {
  if (p.op != OpKind::ag_gemm && p.op != OpKind::gemm_rs && p.op != OpKind::gemm_ar)
    throw std::invalid_argument("chunked plans are built for ag_gemm, gemm_rs and gemm_ar, not " + std::string(to_string(p.op)));
  Plan plan = lower_schedule(p, o.chunked.schedule ? *o.chunked.schedule : make_schedule(p, o.chunked), o);
  return plan;
}

}  // namespace weft
