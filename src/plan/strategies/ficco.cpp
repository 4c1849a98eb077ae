// `ficco_*` (FiCCO, ficco.txt Section V): AllGather+GEMM with communication one level finer than the
// shard. Each shard is cut again into W sub-chunks (by rows for the 1D schedules, by K columns for 2D);
// in step j every rank pulls sub-chunk j of every peer's shard at once, so each step is an
// all-to-all over every link rather than one peer at a time. Transfers are copy-engine pulls, one
// stream per peer (copies queued on one stream would run one after another, one link at a time),
// counting into one signal per step; GEMMs are unmodified library GEMMs on stream 0.
//
//   uniform_fused_1d : every step gathers sub-chunk j of all W shards (the local one included) into one
//                      block and runs one GEMM on it, then scatters the output rows to their places.
//   hetero_fused_1d  : step 0 is the local shard's GEMM (no waiting); then per step one GEMM over the
//                      W-1 received sub-chunks, scattered like the above.
//   hetero_unfused_1d: the local shard first; then per step W-1 GEMMs, one per received sub-chunk,
//                      in place (no gather, no scatter; smaller GEMMs).
//   uniform_fused_2d : sub-chunks are K-column slices; step j's GEMM covers all W*m rows over slice j
//                      and accumulates into C (for M <= K, where row cuts hurt the GEMM most).
//
// a2a_gemm (MoE dispatch, FiCCO's A2A+GEMM): every rank groups its tokens by destination; a rank's
// share is one block from every rank (sizes follow the routing). The same four schedules, with the
// block in the shard's place: step j pulls sub-chunk j (1D, rows) or slice j (2D, K columns) of every
// peer's block for this rank, once the peer says its tokens are grouped.
// Received sub-chunks land directly in a step-major staging buffer, so "gather" is only the copy of
// the local sub-chunk into its slot; the scatter runs on stream 2 so the next GEMM need not wait.
#include <stdexcept>

#include "builder_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kScatter = 1;
// The pulls from the peer `offset` ranks after this one (1 .. W-1) have a stream of their own.
int pull_stream(int offset) { return kScatter + offset; }
int stream_count(int world) { return pull_stream(world - 1) + 1; }

void build_1d(const Problem& p, const PlanOptions& o, FiccoSchedule schedule, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const bool uniform = schedule == FiccoSchedule::uniform_fused_1d;
  const bool fused = schedule != FiccoSchedule::hetero_unfused_1d;
  const auto starts = detail::split_rows(p.m, world);  // sub-chunk j of a shard: rows [starts[j], starts[j+1])
  auto rows_of = [&](int j) { return starts[static_cast<size_t>(j) + 1] - starts[static_cast<size_t>(j)]; };
  // Pieces per fused step: every shard (uniform) or every peer's (hetero).
  const int pieces = uniform ? world : world - 1;

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId w = b.buffer("B", BufferRole::input, p.n, p.k, operand_b_dtype(p));
  const BufferId c = b.buffer("C", BufferRole::output, world * p.m, p.n, p.output_dtype);
  // Fused schedules stage step-major: step j's block holds sub-chunk j of each piece, in rank order.
  const BufferId staged = fused ? b.buffer("A_by_step", BufferRole::scratch, pieces * p.m, p.k, p.input_dtype)
                                : b.buffer("A_gathered", BufferRole::scratch, world * p.m, p.k, p.input_dtype);
  const BufferId staged_out = fused ? b.buffer("C_by_step", BufferRole::scratch, pieces * p.m, p.n, p.output_dtype) : -1;
  std::vector<SignalId> arrived, computed;
  for (int j = 0; j < world; ++j) arrived.push_back(b.signal("step" + std::to_string(j) + "_arrived"));
  if (fused)  // the scatter of step j waits for its GEMM
    for (int j = 0; j < world; ++j) computed.push_back(b.signal("step" + std::to_string(j) + "_computed"));

  // Where piece `q` (a rank) of step j sits in the staging buffer.
  auto slot = [&](int j, int q) {
    const int index = uniform ? q : (q < r ? q : q - 1);
    return pieces * starts[static_cast<size_t>(j)] + index * rows_of(j);
  };

  // Communication: step by step, sub-chunk j from every peer, in ring order after the own rank.
  std::vector<uint64_t> expected(static_cast<size_t>(world), 0);
  for (int j = 0; j < world; ++j) {
    if (rows_of(j) == 0) continue;
    for (int i = 1; i < world; ++i) {
      const int src = (r + i) % world;
      const Region dst = fused ? b.rows(staged, slot(j, src), rows_of(j)) : b.rows(staged, src * p.m + starts[static_cast<size_t>(j)], rows_of(j));
      Step& pull = b.add("pull step " + std::to_string(j) + " from rank " + std::to_string(src), pull_stream(i), Engine::copy_engine,
                         CopyStep{b.rows(a, starts[static_cast<size_t>(j)], rows_of(j), src), dst});
      pull.notifies.push_back({b.own(arrived[static_cast<size_t>(j)]), 1});
      ++expected[static_cast<size_t>(j)];
    }
  }

  if (!uniform)  // hetero: the local shard needs nothing from peers, so it goes first
    b.add("gemm own shard", kCompute, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.rows(c, r * p.m, p.m), o));

  for (int j = 0; j < world; ++j) {
    const int64_t sub = rows_of(j);
    if (sub == 0 || pieces == 0) continue;
    const std::vector<Wait> wait_arrivals =
        expected[static_cast<size_t>(j)] ? std::vector<Wait>{{b.own(arrived[static_cast<size_t>(j)]), expected[static_cast<size_t>(j)]}}
                                         : std::vector<Wait>{};
    const std::string step = "step " + std::to_string(j);
    if (!fused) {
      for (int i = 1; i < world; ++i) {
        const int src = (r + i) % world;
        const int64_t row = src * p.m + starts[static_cast<size_t>(j)];
        Step& gemm = b.add("gemm " + step + " rows of rank " + std::to_string(src), kCompute, Engine::sm,
                           detail::gemm_into(b.rows(staged, row, sub), b.whole(w), b.rows(c, row, sub), o));
        if (i == 1) gemm.waits = wait_arrivals;
      }
      continue;
    }
    if (uniform)
      b.add("gather own " + step, kCompute, Engine::copy_engine,
            CopyStep{b.rows(a, starts[static_cast<size_t>(j)], sub), b.rows(staged, slot(j, r), sub)});
    const int64_t block = pieces * starts[static_cast<size_t>(j)];
    Step& gemm = b.add("gemm " + step, kCompute, Engine::sm,
                       detail::gemm_into(b.rows(staged, block, pieces * sub), b.whole(w), b.rows(staged_out, block, pieces * sub), o));
    gemm.waits = wait_arrivals;
    gemm.notifies.push_back({b.own(computed[static_cast<size_t>(j)]), 1});
    bool first = true;
    for (int q = 0; q < world; ++q) {
      if (!uniform && q == r) continue;
      Step& scatter = b.add("scatter " + step + " rows of rank " + std::to_string(q), kScatter, Engine::copy_engine,
                            CopyStep{b.rows(staged_out, slot(j, q), sub), b.rows(c, q * p.m + starts[static_cast<size_t>(j)], sub)});
      if (first) scatter.waits.push_back({b.own(computed[static_cast<size_t>(j)]), 1});
      first = false;
    }
  }
  b.set_output(b.whole(c));
}

void build_2d(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const auto cuts = detail::split_rows(p.k, world);  // K columns of slice j: [cuts[j], cuts[j+1])
  const detail::AllGatherOperands operands = detail::declare_all_gather_operands(p, b);
  const BufferId a = operands.a, w = operands.b, gathered = operands.gathered, c = operands.c;
  std::vector<SignalId> arrived;
  for (int j = 0; j < world; ++j) arrived.push_back(b.signal("slice" + std::to_string(j) + "_arrived"));
  auto columns = [&](BufferId id, int64_t first_row, int64_t rows, int j, std::optional<int> rank = std::nullopt) {
    Region region = b.rows(id, first_row, rows, rank);
    region.box.col = cuts[static_cast<size_t>(j)];
    region.box.cols = cuts[static_cast<size_t>(j) + 1] - cuts[static_cast<size_t>(j)];
    return region;
  };
  for (int j = 0; j < world; ++j) {
    if (cuts[static_cast<size_t>(j) + 1] == cuts[static_cast<size_t>(j)]) continue;
    for (int i = 1; i < world; ++i) {
      const int src = (r + i) % world;
      Step& pull = b.add("pull slice " + std::to_string(j) + " from rank " + std::to_string(src), pull_stream(i), Engine::copy_engine,
                         CopyStep{columns(a, 0, p.m, j, src), columns(gathered, src * p.m, p.m, j)});
      pull.notifies.push_back({b.own(arrived[static_cast<size_t>(j)]), 1});
    }
  }
  bool first = true;
  for (int j = 0; j < world; ++j) {
    if (cuts[static_cast<size_t>(j) + 1] == cuts[static_cast<size_t>(j)]) continue;
    const std::string slice = "slice " + std::to_string(j);
    b.add("gather own " + slice, kCompute, Engine::copy_engine, CopyStep{columns(a, 0, p.m, j), columns(gathered, r * p.m, p.m, j)});
    GemmStep g = detail::gemm_into(columns(gathered, 0, world * p.m, j), columns(w, 0, p.n, j), b.whole(c), o);
    g.accumulate = !first;  // the first slice defines C, the others add to it
    Step& gemm = b.add(std::string(first ? "gemm " : "gemm+= ") + slice, kCompute, Engine::sm, std::move(g));
    if (world > 1) gemm.waits.push_back({b.own(arrived[static_cast<size_t>(j)]), static_cast<uint64_t>(world - 1)});
    first = false;
  }
  b.set_output(b.whole(c));
}

// a2a_gemm: rank r's share is one block of tokens from every rank s (count(s, r) rows, at
// recv_offset(s) in X and C), grouped on s at send_offset(s). The four schedules cut those blocks
// like the AllGather ones cut shards: by rows into W sub-chunks (1D) or by K into W slices (2D).
void build_a2a(const Problem& p, const PlanOptions& o, FiccoSchedule schedule, RankPlanBuilder& b) {
  const int world = p.world_size, r = b.rank();
  const detail::RoutedRows routed(p);
  auto count = [&](int s) { return routed.count(s, r); };
  auto recv_offset = [&](int s) { return routed.received_before(s, r); };
  auto send_offset = [&](int s) { return routed.sent_before(s, r); };  // rank s's block for r in its grouped tokens
  const bool two_d = schedule == FiccoSchedule::uniform_fused_2d;
  const bool uniform = schedule == FiccoSchedule::uniform_fused_1d || two_d;
  const bool fused = schedule != FiccoSchedule::hetero_unfused_1d;
  const int64_t received = output_rows(p, r);

  const BufferId a = b.buffer("A", BufferRole::input, p.m, p.k, p.input_dtype);
  const BufferId w = b.buffer("B", BufferRole::input, p.n, p.k, operand_b_dtype(p));
  const BufferId sorted = b.buffer("A_by_destination", BufferRole::scratch, p.m, p.k, p.input_dtype, /*symmetric=*/true);
  const BufferId gathered = b.buffer("X", BufferRole::scratch, received, p.k, p.input_dtype);
  const BufferId c = b.buffer("C", BufferRole::output, received, p.n, p.output_dtype);
  const bool staging = fused && !two_d;
  const BufferId staged_out = staging ? b.buffer("C_by_step", BufferRole::scratch, received, p.n, p.output_dtype) : -1;
  std::vector<SignalId> grouped, arrived, computed;
  for (int s = 0; s < world; ++s) grouped.push_back(b.signal("tokens_of" + std::to_string(s) + "_grouped"));
  for (int j = 0; j < world; ++j) arrived.push_back(b.signal("step" + std::to_string(j) + "_arrived"));

  Step& group = b.add("group tokens by destination", kCompute, Engine::sm, detail::rows_by_destination(p, r, b.whole(a), b.whole(sorted)));
  for (int d = 0; d < world; ++d)  // the peers that will pull from this rank's grouped tokens
    if (d != r && routed.count(r, d) > 0)
      group.notifies.push_back({b.signal_on(grouped[static_cast<size_t>(r)], d), 1});
  const Region own_block = b.rows(sorted, send_offset(r), count(r));
  if (!uniform && count(r) > 0)  // hetero: own tokens need nothing from peers, so they go first
    b.add("gemm own tokens", kCompute, Engine::sm, detail::gemm_into(own_block, b.whole(w), b.rows(c, recv_offset(r), count(r)), o));

  // 1D: sub-chunk j of block s is rows [cut(s, j), cut(s, j + 1)). 2D: slice j is columns [k_cut(j), k_cut(j + 1)).
  auto cut = [&](int s, int j) { return detail::split_rows(count(s), world)[static_cast<size_t>(j)]; };
  const auto k_cuts = detail::split_rows(p.k, world);
  auto slice = [&](Region region, int j) {
    region.box.col = k_cuts[static_cast<size_t>(j)];
    region.box.cols = k_cuts[static_cast<size_t>(j) + 1] - k_cuts[static_cast<size_t>(j)];
    return region;
  };
  // Fused 1D schedules stage step-major: step j's block holds sub-chunk j of each piece in rank order.
  std::vector<int64_t> step_start(static_cast<size_t>(world) + 1, 0);
  auto in_step = [&](int q) { return uniform || q != r; };
  for (int j = 0; j < world; ++j) {
    int64_t rows = 0;
    for (int q = 0; q < world; ++q)
      if (in_step(q)) rows += cut(q, j + 1) - cut(q, j);
    step_start[static_cast<size_t>(j) + 1] = step_start[static_cast<size_t>(j)] + rows;
  }
  // Row of X where piece q's part of step j lands.
  auto landing = [&](int q, int j) {
    if (!staging) return recv_offset(q) + (two_d ? 0 : cut(q, j));
    int64_t row = step_start[static_cast<size_t>(j)];
    for (int x = 0; x < q; ++x)
      if (in_step(x)) row += cut(x, j + 1) - cut(x, j);
    return row;
  };

  std::vector<uint64_t> expected(static_cast<size_t>(world), 0);
  for (int j = 0; j < world; ++j)
    for (int i = 1; i < world; ++i) {
      const int src = (r + i) % world;
      const int64_t first = two_d ? 0 : cut(src, j), rows = two_d ? count(src) : cut(src, j + 1) - first;
      if (rows == 0 || (two_d && k_cuts[static_cast<size_t>(j)] == k_cuts[static_cast<size_t>(j) + 1])) continue;
      Region from = b.rows(sorted, send_offset(src) + first, rows, src);
      Region to = b.rows(gathered, landing(src, j), rows);
      if (two_d) {
        from = slice(from, j);
        to = slice(to, j);
      }
      Step& pull = b.add("pull step " + std::to_string(j) + " from rank " + std::to_string(src), pull_stream(i), Engine::copy_engine,
                         CopyStep{from, to});
      pull.waits.push_back({b.own(grouped[static_cast<size_t>(src)]), 1});
      pull.notifies.push_back({b.own(arrived[static_cast<size_t>(j)]), 1});
      ++expected[static_cast<size_t>(j)];
    }
  auto wait_for_step = [&](Step& step, int j) {
    if (expected[static_cast<size_t>(j)]) step.waits.push_back({b.own(arrived[static_cast<size_t>(j)]), expected[static_cast<size_t>(j)]});
  };

  if (two_d) {
    bool first = true;
    for (int j = 0; j < world; ++j) {
      if (k_cuts[static_cast<size_t>(j)] == k_cuts[static_cast<size_t>(j) + 1] || received == 0) continue;
      if (count(r) > 0)
        b.add("gather own slice " + std::to_string(j), kCompute, Engine::copy_engine,
              CopyStep{slice(own_block, j), slice(b.rows(gathered, recv_offset(r), count(r)), j)});
      GemmStep g = detail::gemm_into(slice(b.whole(gathered), j), slice(b.whole(w), j), b.whole(c), o);
      g.accumulate = !first;  // the first slice defines C, the others add to it
      Step& gemm = b.add(std::string(first ? "gemm " : "gemm+= ") + "slice " + std::to_string(j), kCompute, Engine::sm, std::move(g));
      wait_for_step(gemm, j);
      first = false;
    }
    b.set_output(b.whole(c));
    return;
  }
  for (int j = 0; j < world; ++j) {
    const std::string step = "step " + std::to_string(j);
    if (!fused) {
      bool first_of_step = true;
      for (int i = 1; i < world; ++i) {
        const int src = (r + i) % world;
        const int64_t rows = cut(src, j + 1) - cut(src, j);
        if (rows == 0) continue;
        const int64_t row = landing(src, j);
        Step& gemm = b.add("gemm " + step + " tokens of rank " + std::to_string(src), kCompute, Engine::sm,
                           detail::gemm_into(b.rows(gathered, row, rows), b.whole(w), b.rows(c, row, rows), o));
        if (first_of_step) wait_for_step(gemm, j);
        first_of_step = false;
      }
      continue;
    }
    const int64_t block = step_start[static_cast<size_t>(j)], rows = step_start[static_cast<size_t>(j) + 1] - block;
    if (rows == 0) continue;
    const int64_t own_rows = cut(r, j + 1) - cut(r, j);
    if (uniform && own_rows > 0)
      b.add("gather own " + step, kCompute, Engine::copy_engine,
            CopyStep{b.rows(sorted, send_offset(r) + cut(r, j), own_rows), b.rows(gathered, landing(r, j), own_rows)});
    Step& gemm = b.add("gemm " + step, kCompute, Engine::sm,
                       detail::gemm_into(b.rows(gathered, block, rows), b.whole(w), b.rows(staged_out, block, rows), o));
    wait_for_step(gemm, j);
    computed.push_back(b.signal(step + "_computed"));
    gemm.notifies.push_back({b.own(computed.back()), 1});
    bool first = true;
    for (int q = 0; q < world; ++q) {
      const int64_t part = cut(q, j + 1) - cut(q, j);
      if (!in_step(q) || part == 0) continue;
      Step& scatter = b.add("scatter " + step + " tokens of rank " + std::to_string(q), kScatter, Engine::copy_engine,
                            CopyStep{b.rows(staged_out, landing(q, j), part), b.rows(c, recv_offset(q) + cut(q, j), part)});
      if (first) scatter.waits.push_back({b.own(computed.back()), 1});
      first = false;
    }
  }
  b.set_output(b.whole(c));
}

}  // namespace

std::string_view to_string(FiccoSchedule schedule) {
  switch (schedule) {
    case FiccoSchedule::uniform_fused_1d: return "uniform_fused_1d";
    case FiccoSchedule::hetero_fused_1d: return "hetero_fused_1d";
    case FiccoSchedule::hetero_unfused_1d: return "hetero_unfused_1d";
    case FiccoSchedule::uniform_fused_2d: return "uniform_fused_2d";
  }
  return "?";
}

Plan plan_ficco(const Problem& p, const PlanOptions& options, FiccoSchedule schedule) {
  check_problem(p);
  const bool dispatch = p.op == OpKind::a2a_gemm;
  if (p.op != OpKind::ag_gemm && !dispatch)
    throw std::invalid_argument("ficco plans are built for ag_gemm and a2a_gemm, not " + std::string(to_string(p.op)));
  Plan plan;
  plan.strategy = "ficco_" + std::string(to_string(schedule));
  plan.problem = p;
  for (int r = 0; r < p.world_size; ++r) {
    RankPlanBuilder b(r, stream_count(p.world_size));
    if (dispatch) build_a2a(p, options, schedule, b);
    else if (schedule == FiccoSchedule::uniform_fused_2d) build_2d(p, options, b);
    else build_1d(p, options, schedule, b);
    plan.ranks.push_back(b.finish());
  }
  return plan;
}

}  // namespace weft
