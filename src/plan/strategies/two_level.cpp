// `two_level` (Flux and TileLink across nodes): ranks form groups that load/store each other (a node;
// PlanOptions::topology, one group of every rank without it). Within a group data moves by
// load/store as in `decomposed`; between groups by NCCL, in rounds j = 1..G-1 in which rank
// (group g, local index l) exchanges one block with rank (g + j, l) and with (g - j, l) — so each
// round is G pairwise transfers on disjoint links, and a block crosses the network once. Where no
// pair loads/stores (WEFT_P2P=0, GPUs without P2P), every group is one rank: a decomposed plan
// whose transfers are NCCL's.
//   ag_gemm: GEMM the own shard, then the group's shards as the copy engine pulls them, then round
//            j's shards: the one this rank received, and those its group peers received (pulled
//            from them as each lands). Rank r's rows of C are shard r's.
//   gemm_rs: GEMM the rows of other groups' ranks first, round by round. The group peer with the
//            destination's local index sums the group's partials of those rows (loads from the
//            peers' buffers) and sends the sum in its round; each rank then sums its group's
//            partials of its own rows and the G-1 sums it received.
// Streams: 0 GEMMs (and the last sum), 1 copies and group sums, 2 NCCL rounds.
#include "builder_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kLocal = 1;
constexpr int kNetwork = 2;

// Groups of ranks that load/store each other: `size` consecutive ranks each.
struct Groups {
  int size = 1, count = 1;
  int group(int r) const { return r / size; }
  int local(int r) const { return r % size; }
  int rank(int group, int local) const { return ((group % count + count) % count) * size + local; }
};

Groups groups_of(const Problem& p, const PlanOptions& o) {
  const int world = p.world_size;
  if (!o.topology) return {world, 1};
  const Topology& t = *o.topology;
  if (t.world() != world)
    throw std::invalid_argument("two_level: a topology of " + std::to_string(t.world()) + " ranks for world " + std::to_string(world));
  int size = 1;
  while (size < world && t.reaches(0, size) && t.reaches(size, 0)) ++size;
  if (world % size != 0)
    throw std::invalid_argument("two_level needs groups of equal size that load/store each other (" + describe(t) + "): rank 0 reaches " +
                                std::to_string(size) + " rank(s), which does not divide " + std::to_string(world));
  const Groups g{size, world / size};
  for (int a = 0; a < world; ++a)
    for (int b = 0; b < world; ++b)
      if ((g.group(a) == g.group(b)) != t.reaches(a, b))
        throw std::invalid_argument("two_level needs consecutive groups of " + std::to_string(size) + " ranks that load/store within the group: ranks " +
                                    std::to_string(a) + " and " + std::to_string(b) + (t.reaches(a, b) ? " reach" : " do not reach") +
                                    " each other (" + describe(t) + ")");
  return g;
}

// One round of the network exchange: this rank sends `rows` rows of `src` to `to` and receives as
// many into `dst` from `from` (NCCL's all-to-all with every other count zero).
CollectiveStep exchange(int world, int id, int to, int from, const Region& src, const Region& dst) {
  CollectiveStep step{CollectiveKind::all_to_all, id, src, dst, std::vector<int64_t>(static_cast<size_t>(world), 0),
                      std::vector<int64_t>(static_cast<size_t>(world), 0)};
  step.send_rows[static_cast<size_t>(to)] = src.box.rows;
  step.recv_rows[static_cast<size_t>(from)] = dst.box.rows;
  return step;
}

void build_ag_gemm(const Problem& p, const PlanOptions& o, const Groups& g, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank(), mine = g.group(r), l = g.local(r);
  const detail::AllGatherOperands operands = detail::declare_all_gather_operands(p, b);
  const BufferId a = operands.a, w = operands.b, gathered = operands.gathered, c = operands.c;
  // Round j's shard (from rank (group - j, l)) at rows (j - 1) * m; group peers pull from it.
  const BufferId received = b.buffer("from_other_groups", BufferRole::scratch, g.count > 1 ? (g.count - 1) * p.m : 1, p.k, p.input_dtype,
                                     /*symmetric=*/true);
  std::vector<SignalId> arrived, landed;
  for (int s = 0; s < world; ++s) arrived.push_back(b.signal("shard" + std::to_string(s) + "_arrived"));
  for (int s = 0; s < world; ++s) landed.push_back(b.signal("shard" + std::to_string(s) + "_in_group"));
  auto gemm_shard = [&](int s, const Region& rows) {
    return detail::gemm_into(rows, b.whole(w), b.rows(c, s * p.m, p.m), o);
  };
  b.add("gemm shard " + std::to_string(r), kCompute, Engine::sm, gemm_shard(r, b.whole(a)));
  // The network rounds first on their stream, so that they start at once.
  for (int j = 1; j < g.count; ++j) {
    const int to = g.rank(mine + j, l), from = g.rank(mine - j, l);
    Step& round = b.add("exchange round " + std::to_string(j) + ": shard to rank " + std::to_string(to) + ", from rank " + std::to_string(from),
                        kNetwork, Engine::nccl, exchange(world, j - 1, to, from, b.whole(a), b.rows(received, (j - 1) * p.m, p.m)));
    for (int peer = 0; peer < g.size; ++peer)
      round.notifies.push_back({b.signal_on(landed[static_cast<size_t>(from)], g.rank(mine, peer)), 1});
  }
  // The group's shards, pulled in ring order.
  auto pull_and_gemm = [&](int s, const Region& from, const std::vector<Wait>& waits) {
    Step& pull = b.add("pull shard " + std::to_string(s), kLocal, Engine::copy_engine, CopyStep{from, b.rows(gathered, s * p.m, p.m)});
    pull.waits = waits;
    pull.notifies.push_back({b.own(arrived[static_cast<size_t>(s)]), 1});
    Step& gemm = b.add("gemm shard " + std::to_string(s), kCompute, Engine::sm, gemm_shard(s, b.rows(gathered, s * p.m, p.m)));
    gemm.waits.push_back({b.own(arrived[static_cast<size_t>(s)]), 1});
  };
  for (int i = 1; i < g.size; ++i) {
    const int s = g.rank(mine, (l + i) % g.size);
    pull_and_gemm(s, b.whole(a, s), {});
  }
  // Round by round: the shard this rank received, then those its group peers received.
  for (int j = 1; j < g.count; ++j) {
    const int own_source = g.rank(mine - j, l);
    Step& gemm = b.add("gemm shard " + std::to_string(own_source), kCompute, Engine::sm,
                       gemm_shard(own_source, b.rows(received, (j - 1) * p.m, p.m)));
    gemm.waits.push_back({b.own(landed[static_cast<size_t>(own_source)]), 1});
    for (int i = 1; i < g.size; ++i) {
      const int peer = g.rank(mine, (l + i) % g.size), s = g.rank(mine - j, g.local(peer));
      pull_and_gemm(s, b.rows(received, (j - 1) * p.m, p.m, peer), {{b.own(landed[static_cast<size_t>(s)]), 1}});
    }
  }
  b.set_output(b.whole(c));
}

void build_gemm_rs(const Problem& p, const PlanOptions& o, const Groups& g, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank(), mine = g.group(r), l = g.local(r);
  const int64_t shard = p.m / world;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = b.buffer("B", BufferRole::input, p.n, p.k, operand_b_dtype(p));
  // Symmetric: the group peer that sums a destination's rows loads them from here.
  const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const int rounds = std::max(g.count - 1, 1);
  const BufferId group_sum = b.buffer("group_sums", BufferRole::scratch, rounds * shard, p.n, p.output_dtype);
  const BufferId received = b.buffer("from_other_groups", BufferRole::scratch, rounds * shard, p.n, p.output_dtype);
  const BufferId c = b.buffer("C", BufferRole::output, shard, p.n, p.output_dtype);
  std::vector<SignalId> partials_in, summed, round_done;
  // partials_of<d> on the rank that sums d's rows for its group: +1 per group rank's GEMM.
  for (int d = 0; d < world; ++d) partials_in.push_back(b.signal("partials_of" + std::to_string(d)));
  for (int j = 1; j <= rounds; ++j) summed.push_back(b.signal("round" + std::to_string(j) + "_summed"));
  for (int j = 1; j <= rounds; ++j) round_done.push_back(b.signal("round" + std::to_string(j) + "_received"));

  auto gemm_rows_of = [&](int d) {
    Step& gemm = b.add("gemm rows of rank " + std::to_string(d), kCompute, Engine::sm,
                       detail::gemm_into(b.rows(a, d * shard, shard), b.whole(w), b.rows(partial, d * shard, shard), o));
    gemm.notifies.push_back({b.signal_on(partials_in[static_cast<size_t>(d)], g.rank(mine, g.local(d))), 1});
  };
  auto group_sources = [&](int d) {
    std::vector<Region> srcs;
    for (int i = 0; i < g.size; ++i) srcs.push_back(b.rows(partial, d * shard, shard, g.rank(mine, (l + i) % g.size)));
    return srcs;
  };
  // Other groups' rows, round by round (round j's destinations are group mine + j), then this
  // group's rows, own last.
  for (int j = 1; j < g.count; ++j)
    for (int i = 1; i <= g.size; ++i) gemm_rows_of(g.rank(mine + j, (l + i) % g.size));
  for (int i = 1; i <= g.size; ++i) gemm_rows_of(g.rank(mine, (l + i) % g.size));
  for (int j = 1; j < g.count; ++j) {
    const int d = g.rank(mine + j, l);
    const Region sum = b.rows(group_sum, (j - 1) * shard, shard);
    Step& reduce = b.add("sum the group's rows of rank " + std::to_string(d), kLocal, Engine::sm, ReduceStep{group_sources(d), sum});
    reduce.waits.push_back({b.own(partials_in[static_cast<size_t>(d)]), static_cast<uint64_t>(g.size)});
    reduce.notifies.push_back({b.own(summed[static_cast<size_t>(j - 1)]), 1});
    const int from = g.rank(mine - j, l);
    Step& round = b.add("exchange round " + std::to_string(j) + ": sum to rank " + std::to_string(d) + ", from rank " + std::to_string(from),
                        kNetwork, Engine::nccl, exchange(world, j - 1, d, from, sum, b.rows(received, (j - 1) * shard, shard)));
    round.waits.push_back({b.own(summed[static_cast<size_t>(j - 1)]), 1});
    round.notifies.push_back({b.own(round_done[static_cast<size_t>(j - 1)]), 1});
  }
  ReduceStep last{group_sources(r), b.whole(c)};
  for (int j = 1; j < g.count; ++j) last.srcs.push_back(b.rows(received, (j - 1) * shard, shard));
  Step& finish = b.add("sum own rows", kCompute, Engine::sm, std::move(last));
  finish.waits.push_back({b.own(partials_in[static_cast<size_t>(r)]), static_cast<uint64_t>(g.size)});
  for (int j = 1; j < g.count; ++j) finish.waits.push_back({b.own(round_done[static_cast<size_t>(j - 1)]), 1});
  b.set_output(b.whole(c));
}

}  // namespace

Plan plan_two_level(const Problem& p, const PlanOptions& options) {
  check_problem(p);
  if (p.op != OpKind::ag_gemm && p.op != OpKind::gemm_rs)
    throw std::invalid_argument("two_level plans are built for ag_gemm and gemm_rs, not " + std::string(to_string(p.op)));
  const Groups g = groups_of(p, options);
  Plan plan;
  plan.strategy = "two_level";
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    RankPlanBuilder b(r, 3);
    if (p.op == OpKind::ag_gemm) build_ag_gemm(p, options, g, b);
    else build_gemm_rs(p, options, g, b);
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
