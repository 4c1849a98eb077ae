#include "moe_support.hpp"

#include <algorithm>

#include "weft/plan/moe_route.hpp"

namespace weft::detail {

PermuteRowsStep gather_block(const Problem& p, const MoeRows& rows, int s, const Region& tokens, const Region& block) {
  PermuteRowsStep gather;
  gather.src = tokens;
  gather.dst = block;
  const int64_t first = rows.source_first(s);
  for (int64_t row = first; row < first + rows.source_rows(s); ++row)
    gather.source_rows.push_back(rows.token[static_cast<size_t>(row)] - static_cast<int64_t>(s) * p.m);
  return gather;
}

std::vector<size_t> add_expert_gemms(RankPlanBuilder& b, const Problem& p, const MoeRows& rows, int s, BufferId x, BufferId w, BufferId out,
                                     const PlanOptions& options, int stream) {
  std::vector<size_t> added;
  for (int e = 0; e < p.experts; ++e) {
    const int64_t count = rows.block_rows(s, e);
    if (count == 0) continue;
    const int64_t first = rows.block_first(s, e);
    b.add("gemm rank " + std::to_string(s) + "'s rows of expert " + std::to_string(e), stream, Engine::sm,
          gemm_into(b.rows(x, first, count), b.rows(w, static_cast<int64_t>(e) * p.n, p.n), b.rows(out, first, count), options));
    added.push_back(b.step_count() - 1);
  }
  return added;
}

ExpertMajorRows expert_major(const Problem& p, const MoeRows& rows, int64_t align) {
  const int world = p.world_size;
  ExpertMajorRows order;
  order.position.assign(static_cast<size_t>(rows.rows()), 0);
  order.first.assign(static_cast<size_t>(p.experts) + 1, 0);
  order.count.assign(static_cast<size_t>(p.experts), 0);
  int64_t next = 0;
  for (int e = 0; e < p.experts; ++e) {
    int64_t rows_of_e = 0;
    for (int s = 0; s < world; ++s) rows_of_e += rows.block_rows(s, e);
    if (rows_of_e > 0) next = (next + align - 1) / align * align;  // no padding for an expert nobody picked
    order.first[static_cast<size_t>(e)] = next;
    for (int s = 0; s < world; ++s)
      for (int64_t row = rows.block_first(s, e); row < rows.block_first(s, e) + rows.block_rows(s, e); ++row)
        order.position[static_cast<size_t>(row)] = next++;
    order.count[static_cast<size_t>(e)] = next - order.first[static_cast<size_t>(e)];
  }
  order.first[static_cast<size_t>(p.experts)] = next;
  return order;
}

bool ExpertMajorRows::identity() const {
  if (total() != static_cast<int64_t>(position.size())) return false;
  for (size_t row = 0; row < position.size(); ++row)
    if (position[row] != static_cast<int64_t>(row)) return false;
  return true;
}

int grouped_gemm_tile_n(const Problem& p, const PlanOptions& options) {
  // What the overlap GEMM runs: bf16 in and out, K a multiple of 8 (TMA's 16-byte rows).
  if (!options.moe_grouped_gemm || p.input_dtype != DType::bf16 || p.output_dtype != DType::bf16 || p.k % 8 != 0 ||
      (p.op != OpKind::ag_moe && p.op != OpKind::moe_rs))
    return 0;
  for (int tile_n : {256, 192, 128, 96})
    if (p.n % tile_n == 0) return tile_n;
  return 0;
}

void add_expert_major_gemms(RankPlanBuilder& b, const Problem& p, const ExpertMajorRows& order, BufferId x, BufferId w, BufferId out,
                            const PlanOptions& options, int stream, int tile_n, const std::vector<int64_t>* stores_at) {
  auto store_first = [&](int e) { return stores_at ? (*stores_at)[static_cast<size_t>(e)] : order.first[static_cast<size_t>(e)]; };
  int experts_with_rows = 0;
  for (int e = 0; e < p.experts; ++e) experts_with_rows += order.expert_rows(e) > 0;
  // With one expert picked the grouped table would be a shifted plain table (a library GEMM's): the
  // per-expert GEMM is that one GEMM already.
  if (tile_n > 0 && experts_with_rows > 1) {
    // One overlap GEMM: the output space is (x's rows) x (every expert's N columns of B); a tile of
    // expert e covers its rows (from first[e], on the tile grid) and columns e * N + j * tile_n, and
    // stores into its rows and columns j * tile_n of `out`. Rows past an expert's count are padding:
    // its last tile row stores only the expert's rows.
    GemmStep gemm;
    gemm.a = b.whole(x);
    gemm.b = b.whole(w);
    gemm.tile_m = kGroupedGemmTileM;
    gemm.tile_n = tile_n;
    for (int e = 0; e < p.experts; ++e) {
      const int64_t first = order.first[static_cast<size_t>(e)], count = order.expert_rows(e);
      for (int64_t row = 0; row < count; row += kGroupedGemmTileM)
        for (int64_t col = 0; col < p.n; col += tile_n) {
          const int64_t rows = std::min<int64_t>(kGroupedGemmTileM, count - row), cols = std::min<int64_t>(tile_n, p.n - col);
          GemmTile t;
          t.tile = Rect{first + row, static_cast<int64_t>(e) * p.n + col, rows, cols};
          t.store = Region{b.rank(), out, Rect{store_first(e) + row, col, rows, cols}};
          gemm.tiles.push_back(std::move(t));
        }
    }
    if (!gemm.tiles.empty())
      b.add(stores_at ? "grouped gemm of every expert (one source's rows)" : "grouped gemm of every expert (every rank's rows)", stream, Engine::sm,
            std::move(gemm));
    return;
  }
  for (int e = 0; e < p.experts; ++e) {
    const int64_t count = order.expert_rows(e);
    if (count == 0) continue;
    const int64_t first = order.first[static_cast<size_t>(e)];
    b.add("gemm expert " + std::to_string(e) + (stores_at ? " (one source's rows)" : " (every rank's rows)"), stream, Engine::sm,
          gemm_into(b.rows(x, first, count), b.rows(w, static_cast<int64_t>(e) * p.n, p.n), b.rows(out, store_first(e), count), options));
  }
}

CombineRowsStep combine_block(const Problem& p, const MoeRows& rows, int s, const Region& block, const Region& weights, const Region& tokens_out) {
  CombineRowsStep combine;
  combine.src = block;
  combine.weights = weights;
  combine.dst = tokens_out;
  combine.topk = p.topk;
  const int64_t first = rows.source_first(s);
  for (int64_t i = 0; i < p.m; ++i)
    for (int j = 0; j < p.topk; ++j)
      combine.source_rows.push_back(rows.row_of[static_cast<size_t>((static_cast<int64_t>(s) * p.m + i) * p.topk + j)] - first);
  return combine;
}

namespace {

// Source s's rows alone, each expert's rows on the tile grid (`align`), in the source's own region
// of a per-source plan's X: first[e] and count[e] are absolute rows there, position[row] is set for
// the source's rows (0 for the others'), total() is where the source's last expert ends.
ExpertMajorRows source_expert_rows(const Problem& p, const MoeRows& rows, int s, int64_t align) {
  ExpertMajorRows order;
  order.position.assign(static_cast<size_t>(rows.rows()), 0);
  order.first.assign(static_cast<size_t>(p.experts) + 1, 0);
  order.count.assign(static_cast<size_t>(p.experts), 0);
  int64_t next = static_cast<int64_t>(s) * source_capacity(p, align);
  for (int e = 0; e < p.experts; ++e) {
    const int64_t count = rows.block_rows(s, e);
    if (count > 0) next = (next + align - 1) / align * align;  // no padding for an expert the source did not pick
    order.first[static_cast<size_t>(e)] = next;
    for (int64_t row = rows.block_first(s, e); row < rows.block_first(s, e) + count; ++row) order.position[static_cast<size_t>(row)] = next++;
    order.count[static_cast<size_t>(e)] = count;
  }
  order.first[static_cast<size_t>(p.experts)] = next;
  return order;
}

}  // namespace

void add_source_experts(RankPlanBuilder& b, const Problem& p, const MoeRows& rows, int s, const std::string& label, const Region& src,
                        const std::function<int64_t(int64_t)>& src_row, std::vector<Wait> waits, BufferId x, BufferId w, BufferId out,
                        const PlanOptions& options, int stream, int tile_n) {
  const int64_t align = tile_n > 0 ? kGroupedGemmTileM : 1;
  const ExpertMajorRows order = source_expert_rows(p, rows, s, align);
  const int64_t base = static_cast<int64_t>(s) * source_capacity(p, align);
  PermuteRowsStep by_expert{src, b.rows(x, base, order.total() - base), std::vector<int64_t>(static_cast<size_t>(order.total() - base), 0), {}};
  for (int64_t row = rows.source_first(s); row < rows.source_first(s) + rows.source_rows(s); ++row)
    by_expert.source_rows[static_cast<size_t>(order.position[static_cast<size_t>(row)] - base)] = src_row(row);
  b.add(label, stream, Engine::sm, std::move(by_expert)).waits = std::move(waits);
  std::vector<int64_t> stores_at;
  for (int e = 0; e < p.experts; ++e) stores_at.push_back(rows.block_first(s, e));
  add_expert_major_gemms(b, p, order, x, w, out, options, stream, tile_n, &stores_at);
}

void add_routed_moe(RankPlanBuilder& b, const Problem& p, BufferId a, BufferId w, const PlanOptions& options) {
  const int tile_n = grouped_gemm_tile_n(p, options);
  if (tile_n == 0) throw std::invalid_argument(device_routing_gap("sequential", p, options));
  const int world = p.world_size;
  const int64_t tokens = int64_t{world} * p.m, pairs = tokens * p.topk;
  const int64_t align = kGroupedGemmTileM, capacity = moe_route_capacity(world, p.m, p.topk, p.experts, align);
  const bool ag = p.op == OpKind::ag_moe;
  // Every rank's choices: the route needs all of them (the layout is by source rank).
  const BufferId own = b.buffer("choices", BufferRole::input, p.m, p.topk, DType::i32);
  BufferId choices = own;
  if (world > 1) {
    choices = b.buffer("choices_gathered", BufferRole::scratch, tokens, p.topk, DType::i32);
    b.add("all_gather choices", 0, Engine::nccl, CollectiveStep{CollectiveKind::all_gather, 0, b.whole(own), b.whole(choices), {}, {}});
  }
  RouteStep route;
  route.choices = b.whole(choices);
  route.experts = p.experts;
  route.topk = p.topk;
  route.align = align;
  route.source = ag ? RouteSource::token : RouteSource::layout_row;
  route.scratch_source = b.whole(b.buffer(ag ? "route_tokens" : "route_layout_rows", BufferRole::scratch, capacity, 1, DType::i32));
  route.expert_first = b.whole(b.buffer("route_expert_first", BufferRole::scratch, int64_t{p.experts} + 1, 1, DType::i32));
  if (ag)
    route.layout_scratch = b.whole(b.buffer("route_layout_scratch", BufferRole::scratch, pairs, 1, DType::i32));
  else
    route.pair_scratch = b.whole(b.buffer("route_pair_scratch", BufferRole::scratch, pairs, 1, DType::i32));
  // The rows every expert reads: ag_moe's gathered tokens, moe_rs's A in the op layout.
  BufferId source = a;
  if (ag && world > 1) {
    source = b.buffer("A_gathered", BufferRole::scratch, tokens, p.k, p.input_dtype);
    b.add("all_gather tokens", 0, Engine::nccl, CollectiveStep{CollectiveKind::all_gather, 1, b.whole(a), b.whole(source), {}, {}});
  }
  const Region expert_first = route.expert_first, scratch_source = route.scratch_source;
  const std::optional<Region> layout_scratch = route.layout_scratch, pair_scratch = route.pair_scratch;
  b.add("route every rank's choices", 0, Engine::sm, std::move(route));
  const BufferId x = b.buffer(ag ? "X" : "A_by_expert", BufferRole::scratch, capacity, p.k, p.input_dtype);
  b.add(ag ? "gather every rank's rows by expert" : "A's rows by expert", 0, Engine::sm,
        PermuteRowsStep{b.whole(source), b.whole(x), {}, scratch_source});
  const BufferId y = b.buffer(ag ? "Y_by_expert" : "P", BufferRole::scratch, capacity, p.n, p.output_dtype);
  GemmStep gemm;
  gemm.a = b.whole(x);
  gemm.b = b.whole(w);
  gemm.tile_m = kGroupedGemmTileM;
  gemm.tile_n = tile_n;
  gemm.routed = RoutedGemm{expert_first, b.whole(y), p.experts};
  b.add("routed grouped gemm of every expert", 0, Engine::sm, std::move(gemm));
  if (ag) {
    const BufferId c = b.buffer("C", BufferRole::output, pairs, p.n, p.output_dtype);
    b.add("rows back by source", 0, Engine::sm, PermuteRowsStep{b.whole(y), b.whole(c), {}, layout_scratch});
    b.set_output(b.whole(c));
    return;
  }
  const BufferId weights = b.buffer("topk_weights", BufferRole::input, tokens, p.topk, topk_weights_dtype(p));
  const BufferId z = b.buffer("Z", BufferRole::scratch, tokens, p.n, p.output_dtype);
  const BufferId c = b.buffer("C", BufferRole::output, p.m, p.n, p.output_dtype);
  b.add("top-k reduce every rank's tokens", 0, Engine::sm, CombineRowsStep{b.whole(y), b.whole(weights), b.whole(z), p.topk, {}, pair_scratch});
  b.add("reduce_scatter tokens", 0, Engine::nccl, CollectiveStep{CollectiveKind::reduce_scatter, 1, b.whole(z), b.whole(c), {}, {}});
  b.set_output(b.whole(c));
}

}  // namespace weft::detail
