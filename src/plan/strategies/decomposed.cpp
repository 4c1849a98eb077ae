// `decomposed` (AsyncTP style): the GEMM is split into one GEMM per shard on the compute stream
// (stream 0) and the communication into one transfer per shard on the communication stream (stream 1),
// ordered by signals, so that shard i's transfer overlaps shard i+1's GEMM. Peers are visited in ring
// order starting after the own rank, so no two ranks talk to the same peer at the same step.
//   ag_gemm : pull peer p's A shard with the copy engine, then GEMM that shard; the local shard first.
//             With PlanOptions::all_gather_source push: push the own shard from the caller's memory
//             into every peer's gathered A instead, and GEMM each peer's shard as it lands.
//   gemm_rs : GEMM the rows destined for rank d, push them into d's receive slot, d sums its slots.
//   gemm_ar : GEMM row chunk c, then an NCCL all-reduce of chunk c (same chunk order on all ranks).
//   gemm_a2a: group A's rows by destination, GEMM each destination's rows, push them into the
//             destination's output at this rank's offset.
//   a2a_gemm: group the tokens by destination, push each destination's block into its gathered
//             tokens at this rank's offset; every rank GEMMs its own block at once and each peer's
//             block as it arrives.
//   ag_moe  : pull peer p's tokens with the copy engine (ring order, the own tokens read in place);
//             as a source's tokens are in, gather its rows by expert (each expert's rows on the
//             grouped GEMM's tile grid, in that source's own region of X) and run its grouped GEMM,
//             whose tiles store straight into the source's rows of C (the op's layout). Source i's
//             pull overlaps source i-1's gather and GEMM; the price is padding per (source, expert)
//             instead of per expert.
//   moe_rs  : as gemm_rs, block by block: for source s (ring order after the own block, which comes
//             last) gather A's rows of block s by expert onto the tile grid, one grouped GEMM storing
//             into the block's rows of P, the top-k reduction of the block to s's tokens, pushed by
//             the copy engine into s's receive slot; each rank sums its slots.
//   ag_attention: RingAttention, attention over each peer's keys as they arrive, merged by
//             log-sum-exp (attention.cpp).
#include "attention.hpp"
#include "builder_support.hpp"
#include "moe_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kComm = 1;

void build_ag_gemm(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const bool push = o.all_gather_source == AllGatherSource::push;
  const detail::AllGatherOperands operands = detail::declare_all_gather_operands(p, b, o.all_gather_source);
  const BufferId a = operands.a, w = operands.b, gathered = operands.gathered, c = operands.c;
  std::vector<SignalId> arrived;
  for (int s = 0; s < world; ++s) arrived.push_back(b.signal("shard" + std::to_string(s) + "_arrived"));
  // The own shard stays in A (its GEMM reads it there); the peers' land in the gathered A.
  std::vector<Region> pieces;
  for (int s = 0; s < world; ++s) pieces.push_back(s == r ? b.whole(a) : b.rows(gathered, s * p.m, p.m));
  b.set_gathered_a(std::move(pieces));
  if (push) {
    // This rank's shard goes out first, from where the caller has it, to rank r+1, r+2, ... (at step
    // i every rank pushes to the rank i after it: no two push to one peer at once) ...
    for (int i = 1; i < world; ++i) {
      const int dst = (r + i) % world;
      Step& send = b.add("push shard to rank " + std::to_string(dst), kComm, Engine::copy_engine,
                         CopyStep{b.whole(a), b.rows(gathered, r * p.m, p.m, dst)});
      send.notifies.push_back({b.signal_on(arrived[static_cast<size_t>(r)], dst), 1});
    }
    // ... while the GEMM reads it in place, then each peer's shard as it lands, in the order they come
    // (at step i from the rank i before this one).
    b.add("gemm shard " + std::to_string(r), kCompute, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.rows(c, r * p.m, p.m), o));
    for (int i = 1; i < world; ++i) {
      const int src = (r - i + world) % world;
      Step& gemm = b.add("gemm shard " + std::to_string(src), kCompute, Engine::sm,
                         detail::gemm_into(b.rows(gathered, src * p.m, p.m), b.whole(w), b.rows(c, src * p.m, p.m), o));
      gemm.waits.push_back({b.own(arrived[static_cast<size_t>(src)]), 1});
    }
    b.set_output(b.whole(c));
    return;
  }
  b.add("gemm shard " + std::to_string(r), kCompute, Engine::sm,
        detail::gemm_into(b.whole(a), b.whole(w), b.rows(c, r * p.m, p.m), o));
  for (int i = 1; i < world; ++i) {
    const int src = (r + i) % world;
    Step& pull = b.add("pull shard " + std::to_string(src), kComm, Engine::copy_engine,
                       CopyStep{b.whole(a, src), b.rows(gathered, src * p.m, p.m)});
    pull.notifies.push_back({b.own(arrived[static_cast<size_t>(src)]), 1});
    Step& gemm = b.add("gemm shard " + std::to_string(src), kCompute, Engine::sm,
                       detail::gemm_into(b.rows(gathered, src * p.m, p.m), b.whole(w), b.rows(c, src * p.m, p.m), o));
    gemm.waits.push_back({b.own(arrived[static_cast<size_t>(src)]), 1});
  }
  b.set_output(b.whole(c));
}

void build_ag_moe(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  if (o.all_gather_source == AllGatherSource::push)
    throw std::invalid_argument("decomposed ag_moe pulls each peer's tokens (pull); push is built for ag_gemm only");
  const int world = p.world_size, r = b.rank();
  const MoeRows rows = moe_rows(p);
  const int tile_n = detail::grouped_gemm_tile_n(p, o);
  const int64_t align = tile_n > 0 ? detail::kGroupedGemmTileM : 1;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId w = detail::declare_b(b, p);
  const BufferId gathered = b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype);
  const BufferId x = b.buffer("X", BufferRole::scratch, world * detail::source_capacity(p, align), p.k, p.input_dtype);
  const BufferId c = b.buffer("C", BufferRole::output, rows.rows(), p.n, p.output_dtype);
  std::vector<SignalId> arrived;
  for (int s = 0; s < world; ++s) arrived.push_back(b.signal("tokens" + std::to_string(s) + "_arrived"));
  for (int i = 0; i < world; ++i) {
    const int s = (r + i) % world;
    if (s != r) {
      Step& pull = b.add("pull rank " + std::to_string(s) + "'s tokens", kComm, Engine::copy_engine,
                         CopyStep{b.whole(a, s), b.rows(gathered, s * p.m, p.m)});
      pull.notifies.push_back({b.own(arrived[static_cast<size_t>(s)]), 1});
    }
    std::vector<Wait> waits;
    if (s != r) waits.push_back({b.own(arrived[static_cast<size_t>(s)]), 1});
    detail::add_source_experts(b, p, rows, s, "gather rank " + std::to_string(s) + "'s rows by expert",
                               s == r ? b.whole(a) : b.rows(gathered, s * p.m, p.m),
                               [&](int64_t row) { return rows.token[static_cast<size_t>(row)] - static_cast<int64_t>(s) * p.m; }, std::move(waits), x,
                               w, c, o, kCompute, tile_n);
  }
  b.set_output(b.whole(c));
}

void build_moe_rs(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const MoeRows rows = moe_rows(p);
  const int tile_n = detail::grouped_gemm_tile_n(p, o);
  const int64_t align = tile_n > 0 ? detail::kGroupedGemmTileM : 1;
  const BufferId a = b.buffer("A", BufferRole::input, a_rows(p), p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId weights = b.buffer("topk_weights", BufferRole::input, world * p.m, p.topk, topk_weights_dtype(p));
  const BufferId x = b.buffer("X", BufferRole::scratch, world * detail::source_capacity(p, align), p.k, p.input_dtype);
  const BufferId partial = b.buffer("P", BufferRole::scratch, rows.rows(), p.n, p.output_dtype);
  const BufferId tokens = b.buffer("Z", BufferRole::scratch, world * p.m, p.n, p.output_dtype);
  // Slot s of `received` holds rank s's top-k sums of this rank's tokens.
  const BufferId received = b.buffer("received", BufferRole::scratch, world * p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
  std::vector<SignalId> ready, filled;
  for (int d = 0; d < world; ++d) ready.push_back(b.signal("tokens_for" + std::to_string(d) + "_ready"));
  for (int s = 0; s < world; ++s) filled.push_back(b.signal("slot" + std::to_string(s) + "_filled"));
  for (int i = 1; i <= world; ++i) {
    const int s = (r + i) % world;
    detail::add_source_experts(b, p, rows, s, "rank " + std::to_string(s) + "'s rows of A by expert",
                               b.rows(a, rows.source_first(s), rows.source_rows(s)), [&](int64_t row) { return row - rows.source_first(s); }, {}, x, w,
                               partial, o, kCompute, tile_n);
    const Region block = b.rows(partial, rows.source_first(s), rows.source_rows(s));
    if (s == r) {
      b.add("top-k reduce my tokens", kCompute, Engine::sm,
            detail::combine_block(p, rows, s, block, b.rows(weights, s * p.m, p.m), b.rows(received, r * p.m, p.m)));
      continue;
    }
    Step& combine = b.add("top-k reduce rank " + std::to_string(s) + "'s tokens", kCompute, Engine::sm,
                          detail::combine_block(p, rows, s, block, b.rows(weights, s * p.m, p.m), b.rows(tokens, s * p.m, p.m)));
    combine.notifies.push_back({b.own(ready[static_cast<size_t>(s)]), 1});
    Step& push = b.add("push tokens to rank " + std::to_string(s), kComm, Engine::copy_engine,
                       CopyStep{b.rows(tokens, s * p.m, p.m), b.rows(received, r * p.m, p.m, s)});
    push.waits.push_back({b.own(ready[static_cast<size_t>(s)]), 1});
    push.notifies.push_back({b.signal_on(filled[static_cast<size_t>(r)], s), 1});
  }
  ReduceStep sum;
  for (int s = 0; s < world; ++s) sum.srcs.push_back(b.rows(received, s * p.m, p.m));
  sum.dst = b.whole(c);
  Step& reduce = b.add("sum received tokens", kCompute, Engine::sm, std::move(sum));
  for (int s = 0; s < world; ++s)
    if (s != r) reduce.waits.push_back({b.own(filled[static_cast<size_t>(s)]), 1});
  b.set_output(b.whole(c));
}

void build_gemm_rs(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const int64_t shard = p.m / world;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype);
  // Slot s of `received` holds rank s's partial sum of this rank's rows.
  const BufferId received = b.buffer("received", BufferRole::scratch, p.m, p.n, p.output_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, shard, p.n, p.output_dtype);
  std::vector<SignalId> ready, filled;
  for (int d = 0; d < world; ++d) ready.push_back(b.signal("partial_for" + std::to_string(d) + "_ready"));
  for (int s = 0; s < world; ++s) filled.push_back(b.signal("slot" + std::to_string(s) + "_filled"));
  for (int i = 1; i <= world; ++i) {
    const int dst = (r + i) % world;
    const Region rows_of_dst = b.rows(a, dst * shard, shard);
    if (dst == r) {
      b.add("gemm own rows", kCompute, Engine::sm,
            detail::gemm_into(rows_of_dst, b.whole(w), b.rows(received, r * shard, shard), o));
      continue;
    }
    Step& gemm = b.add("gemm rows of rank " + std::to_string(dst), kCompute, Engine::sm,
                       detail::gemm_into(rows_of_dst, b.whole(w), b.rows(partial, dst * shard, shard), o));
    gemm.notifies.push_back({b.own(ready[static_cast<size_t>(dst)]), 1});
    Step& push = b.add("push partial to rank " + std::to_string(dst), kComm, Engine::copy_engine,
                       CopyStep{b.rows(partial, dst * shard, shard), b.rows(received, r * shard, shard, dst)});
    push.waits.push_back({b.own(ready[static_cast<size_t>(dst)]), 1});
    push.notifies.push_back({b.signal_on(filled[static_cast<size_t>(r)], dst), 1});
  }
  ReduceStep sum;
  for (int s = 0; s < world; ++s) sum.srcs.push_back(b.rows(received, s * shard, shard));
  sum.dst = b.whole(c);
  Step& reduce = b.add("sum received partials", kCompute, Engine::sm, std::move(sum));
  for (int s = 0; s < world; ++s)
    if (s != r) reduce.waits.push_back({b.own(filled[static_cast<size_t>(s)]), 1});
  b.set_output(b.whole(c));
}

void build_gemm_ar(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size;
  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
  const int chunks = static_cast<int>(std::min<int64_t>(world, p.m));
  const auto starts = detail::split_rows(p.m, chunks);
  std::vector<SignalId> ready;
  for (int i = 0; i < chunks; ++i) ready.push_back(b.signal("chunk" + std::to_string(i) + "_ready"));
  for (int i = 0; i < chunks; ++i) {
    const int64_t first = starts[static_cast<size_t>(i)], count = starts[static_cast<size_t>(i) + 1] - first;
    Step& gemm = b.add("gemm chunk " + std::to_string(i), kCompute, Engine::sm,
                       detail::gemm_into(b.rows(a, first, count), b.whole(w), b.rows(c, first, count), o));
    gemm.notifies.push_back({b.own(ready[static_cast<size_t>(i)]), 1});
    Step& reduce = b.add("all_reduce chunk " + std::to_string(i), kComm, Engine::nccl,
                         CollectiveStep{CollectiveKind::all_reduce, i, b.rows(c, first, count), b.rows(c, first, count), {}, {}});
    reduce.waits.push_back({b.own(ready[static_cast<size_t>(i)]), 1});
  }
  b.set_output(b.whole(c));
}

void build_gemm_a2a(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const detail::RoutedRows routed(p);
  auto count = [&](int s, int d) { return routed.count(s, d); };
  auto recv_offset = [&](int s, int d) { return routed.received_before(s, d); };
  const int64_t most_received = routed.most_received();

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId sorted = b.buffer("A_by_destination", BufferRole::scratch, p.m, p.k, p.input_dtype);
  const BufferId partial = b.buffer("P", BufferRole::scratch, p.m, p.n, p.output_dtype);
  // Symmetric so that peers can push into it; as large as the largest rank's result.
  const BufferId c = b.buffer("C", BufferRole::output, most_received, p.n, p.output_dtype, /*symmetric=*/true);
  std::vector<SignalId> ready, received;
  for (int d = 0; d < world; ++d) ready.push_back(b.signal("rows_for" + std::to_string(d) + "_ready"));
  for (int s = 0; s < world; ++s) received.push_back(b.signal("rows_from" + std::to_string(s) + "_received"));

  auto send_offset = [&](int d) { return routed.sent_before(r, d); };
  b.add("group rows by destination", kCompute, Engine::sm, detail::rows_by_destination(p, r, b.whole(a), b.whole(sorted)));
  for (int i = 1; i <= world; ++i) {
    const int dst = (r + i) % world;
    const int64_t rows = count(r, dst);
    if (rows == 0) continue;
    const Region mine = b.rows(sorted, send_offset(dst), rows);
    if (dst == r) {
      b.add("gemm own rows", kCompute, Engine::sm,
            detail::gemm_into(mine, b.whole(w), b.rows(c, recv_offset(r, r), rows), o));
      continue;
    }
    const Region staged = b.rows(partial, send_offset(dst), rows);
    Step& gemm = b.add("gemm rows for rank " + std::to_string(dst), kCompute, Engine::sm,
                       detail::gemm_into(mine, b.whole(w), staged, o));
    gemm.notifies.push_back({b.own(ready[static_cast<size_t>(dst)]), 1});
    Step& push = b.add("push rows to rank " + std::to_string(dst), kComm, Engine::copy_engine,
                       CopyStep{staged, b.rows(c, recv_offset(r, dst), rows, dst)});
    push.waits.push_back({b.own(ready[static_cast<size_t>(dst)]), 1});
    push.notifies.push_back({b.signal_on(received[static_cast<size_t>(r)], dst), 1});
  }
  std::vector<Wait> incoming;
  for (int s = 0; s < world; ++s)
    if (s != r && count(s, r) > 0) incoming.push_back({b.own(received[static_cast<size_t>(s)]), 1});
  if (!incoming.empty()) b.add("wait for incoming rows", kCompute, Engine::sm, JoinStep{}).waits = incoming;
  b.set_output(b.rows(c, 0, output_rows(p, r)));
}

void build_a2a_gemm(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const detail::RoutedRows routed(p);
  auto count = [&](int s, int d) { return routed.count(s, d); };
  auto recv_offset = [&](int s, int d) { return routed.received_before(s, d); };
  const int64_t most_received = routed.most_received();
  auto send_offset = [&](int d) { return routed.sent_before(r, d); };

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = detail::declare_b(b, p);
  const BufferId sorted = b.buffer("A_by_destination", BufferRole::scratch, p.m, p.k, p.input_dtype);
  // Symmetric so that peers can push their tokens into it; as large as the largest rank's share.
  const BufferId gathered = b.buffer("X", BufferRole::scratch, most_received, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId c = b.buffer("C", BufferRole::output, output_rows(p, r), p.n, p.output_dtype);
  const SignalId grouped = b.signal("tokens_grouped");
  std::vector<SignalId> received;
  for (int s = 0; s < world; ++s) received.push_back(b.signal("tokens_from" + std::to_string(s) + "_received"));

  Step& group = b.add("group tokens by destination", kCompute, Engine::sm, detail::rows_by_destination(p, r, b.whole(a), b.whole(sorted)));
  bool pushes = false;
  for (int d = 0; d < world; ++d) pushes = pushes || (d != r && count(r, d) > 0);
  if (pushes) group.notifies.push_back({b.own(grouped), 1});  // a signal nobody awaits would leak into the next epoch
  // Own tokens first: no transfer. Then pushes in ring order (rank r + 1 first), so no two ranks
  // push to the same peer at one step.
  if (count(r, r) > 0)
    b.add("gemm own tokens", kCompute, Engine::sm,
          detail::gemm_into(b.rows(sorted, send_offset(r), count(r, r)), b.whole(w),
                            b.rows(c, recv_offset(r, r), count(r, r)), o));
  for (int i = 1; i < world; ++i) {
    const int dst = (r + i) % world;
    if (count(r, dst) == 0) continue;
    Step& push = b.add("push tokens to rank " + std::to_string(dst), kComm, Engine::copy_engine,
                       CopyStep{b.rows(sorted, send_offset(dst), count(r, dst)),
                                b.rows(gathered, recv_offset(r, dst), count(r, dst), dst)});
    push.waits.push_back({b.own(grouped), 1});
    push.notifies.push_back({b.signal_on(received[static_cast<size_t>(r)], dst), 1});
  }
  // Peers' blocks in the order they are pushed to this rank: rank r - 1 pushes here first.
  for (int i = 1; i < world; ++i) {
    const int src = ((r - i) % world + world) % world;
    if (count(src, r) == 0) continue;
    const Region tokens = b.rows(gathered, recv_offset(src, r), count(src, r));
    Step& gemm = b.add("gemm tokens of rank " + std::to_string(src), kCompute, Engine::sm,
                       detail::gemm_into(tokens, b.whole(w), b.rows(c, recv_offset(src, r), count(src, r)), o));
    gemm.waits.push_back({b.own(received[static_cast<size_t>(src)]), 1});
  }
  b.set_output(b.whole(c));
}

}  // namespace

Plan plan_decomposed(const Problem& p, const PlanOptions& options) {
  check_problem(p);
  Plan plan;
  plan.strategy = "decomposed";
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    RankPlanBuilder b(r, 2);
    switch (p.op) {
      case OpKind::ag_gemm: build_ag_gemm(p, options, b); break;
      case OpKind::gemm_rs: build_gemm_rs(p, options, b); break;
      case OpKind::gemm_ar: build_gemm_ar(p, options, b); break;
      case OpKind::gemm_a2a: build_gemm_a2a(p, options, b); break;
      case OpKind::a2a_gemm: build_a2a_gemm(p, options, b); break;
      case OpKind::ag_attention: detail::build_attention_ring(p, options, b); break;
      case OpKind::ag_moe: build_ag_moe(p, options, b); break;
      case OpKind::moe_rs: build_moe_rs(p, options, b); break;
    }
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
