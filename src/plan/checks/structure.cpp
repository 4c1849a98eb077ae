// Structural checks: everything a plan names exists, shapes agree, peers are reached only through
// symmetric buffers, and every rank joins every collective with matching arguments.
#include <algorithm>
#include <map>
#include <set>

#include "checks.hpp"
#include "weft/plan/moe_route.hpp"

namespace weft::detail {

namespace {

struct StructureChecker {
  const Plan& plan;
  ValidationReport& report;

  void fail(const std::string& where, const std::string& what) {
    report.errors.push_back({"structure", where + ": " + what});
  }

  const BufferDecl* buffer(const Region& r) const {
    if (r.rank < 0 || r.rank >= plan.world_size()) return nullptr;
    const auto& buffers = plan.ranks[static_cast<size_t>(r.rank)].buffers;
    if (r.buffer < 0 || r.buffer >= static_cast<BufferId>(buffers.size())) return nullptr;
    return &buffers[static_cast<size_t>(r.buffer)];
  }

  // A region must name an existing buffer, lie inside it, and be local unless the buffer is symmetric.
  // Only a GEMM's b operand may lie in a column-major buffer (the other steps move row-major boxes).
  bool region(const std::string& where, int own_rank, const Region& r, const char* what, bool column_major_allowed = false) {
    const BufferDecl* decl = buffer(r);
    if (!decl) {
      fail(where, std::string(what) + " names buffer " + std::to_string(r.buffer) + " on rank " + std::to_string(r.rank) +
                      ", which does not exist");
      return false;
    }
    if (decl->order == MemoryOrder::column_major && !column_major_allowed) {
      fail(where, std::string(what) + " " + describe_region(plan, r) + " lies in column-major buffer '" + decl->name +
                      "', which only a GEMM's b operand may read");
      return false;
    }
    if (r.box.rows < 0 || r.box.cols < 0 || r.box.row < 0 || r.box.col < 0 || r.box.row_end() > decl->rows ||
        r.box.col_end() > decl->cols) {
      fail(where, std::string(what) + " " + describe_region(plan, r) + " lies outside buffer '" + decl->name + "' [" +
                      std::to_string(decl->rows) + "x" + std::to_string(decl->cols) + "]");
      return false;
    }
    if (r.rank != own_rank && !decl->symmetric) {
      fail(where, std::string(what) + " " + describe_region(plan, r) + " is on another rank but buffer '" + decl->name +
                      "' is not symmetric, so peers cannot reach it");
      return false;
    }
    return true;
  }

  void signal(const std::string& where, const SignalRef& ref, int own_rank, bool is_wait) {
    if (ref.rank < 0 || ref.rank >= plan.world_size() || ref.id < 0 ||
        ref.id >= static_cast<SignalId>(plan.ranks[static_cast<size_t>(ref.rank)].signals.size())) {
      fail(where, "names " + describe_signal(plan, ref) + ", which does not exist");
      return;
    }
    if (is_wait && ref.rank != own_rank) fail(where, "waits on " + describe_signal(plan, ref) + " of another rank; waits must be local");
  }

  void same_shape(const std::string& where, const Rect& a, const Rect& b, const char* what) {
    if (a.rows != b.rows || a.cols != b.cols)
      fail(where, std::string(what) + ": shapes differ (" + std::to_string(a.rows) + "x" + std::to_string(a.cols) +
                      " vs " + std::to_string(b.rows) + "x" + std::to_string(b.cols) + ")");
  }

  void gemm(const std::string& where, int rank, const GemmStep& g) {
    bool ok = region(where, rank, g.a, "operand a");
    ok = region(where, rank, g.b, "operand b", /*column_major_allowed=*/true) && ok;
    if (!ok) return;
    if (g.a.box.cols != g.b.box.cols)
      fail(where, "operand a has K=" + std::to_string(g.a.box.cols) + " but operand b has K=" + std::to_string(g.b.box.cols));
    if (g.tile_m < 1 || g.tile_n < 1) fail(where, "tile size must be positive");
    if (g.sm_limit < 0) fail(where, "sm_limit must be 0 (all SMs) or positive");
    if (g.k_splits < 1) fail(where, "k_splits must be at least 1");
    if (g.tail_splits < 1) fail(where, "tail_splits must be at least 1");
    if (g.tail_splits > 1 && (g.k_splits > 1 || g.sm_limit != 0 || !g.persistent))
      fail(where, "tail_splits " + std::to_string(g.tail_splits) + " needs an unsplit, persistent GEMM on every SM");
    if (g.stream_k && (g.k_splits > 1 || g.tail_splits > 1 || g.sm_limit != 0 || !g.persistent))
      fail(where, "stream_k needs an unsplit (k_splits 1, tail_splits 1), persistent GEMM on every SM");
    if (g.k_splits > 1 && (g.sm_limit != 0 || !g.persistent))
      fail(where, "a GEMM on limited SMs or with a CTA per tile keeps its waves and cannot split K (k_splits " +
                      std::to_string(g.k_splits) + ")");
    if (g.routed) {
      // A routed grouped GEMM (RoutedGemm): no listed tiles; out has a's rows and n columns.
      const RoutedGemm& r = *g.routed;
      if (!g.tiles.empty()) fail(where, "a routed GEMM lists tiles; its tiles are made per call");
      if (r.experts < 1 || g.b.box.rows % r.experts != 0)
        fail(where, "a routed GEMM over " + std::to_string(r.experts) + " experts needs b's rows (" + std::to_string(g.b.box.rows) +
                        ") a multiple of them");
      if (g.accumulate || g.k_splits != 1 || g.tail_splits != 1 || g.stream_k || g.exchanged || g.cluster_m * g.cluster_n != 1)
        fail(where, "a routed GEMM runs whole tiles only (no accumulate, split, stream-K, exchanged product or clusters)");
      if (region(where, rank, r.expert_first, "expert_first") && region(where, rank, r.out, "out")) {
        index_region(where, r.expert_first, int64_t{r.experts} + 1, "expert and one more");
        if (r.experts >= 1 && (r.out.box.rows != g.a.box.rows || r.out.box.cols != g.b.box.rows / r.experts))
          fail(where, "a routed GEMM stores [a rows, n] = [" + std::to_string(g.a.box.rows) + "x" + std::to_string(g.b.box.rows / r.experts) +
                          "], not " + describe_region(plan, r.out));
      }
      return;
    }
    std::set<std::pair<int, BufferId>> targets;
    for (const auto& t : g.tiles) {
      targets.insert({t.store.rank, t.store.buffer});
      for (const Region& addend : t.addends) targets.insert({addend.rank, addend.buffer});
    }
    if (targets.size() > static_cast<size_t>(kMaxGemmTileTargets))
      fail(where, "tiles store into or read addends from " + std::to_string(targets.size()) + " buffers; the overlap GEMM holds " +
                      std::to_string(kMaxGemmTileTargets));
    const Rect space{0, 0, g.a.box.rows, g.b.box.rows};
    for (size_t i = 0; i < g.tiles.size(); ++i) {
      const auto& t = g.tiles[i];
      const std::string tile_where = where + " tile " + std::to_string(i);
      if (t.tile.empty() || !contains(space, t.tile))
        fail(tile_where, "tile box [" + std::to_string(t.tile.row) + "+" + std::to_string(t.tile.rows) + "," +
                             std::to_string(t.tile.col) + "+" + std::to_string(t.tile.cols) + "] is empty or outside the " +
                             std::to_string(space.rows) + "x" + std::to_string(space.cols) + " output");
      if (region(tile_where, rank, t.store, "store")) same_shape(tile_where, t.tile, t.store.box, "store target");
      if (t.wait) signal(tile_where, t.wait->signal, rank, true);
      if (t.notify) signal(tile_where, t.notify->signal, rank, false);
      for (const Region& addend : t.addends)
        if (region(tile_where, rank, addend, "addend")) same_shape(tile_where, t.tile, addend.box, "addend");
      if (t.a_rows && region(tile_where, rank, *t.a_rows, "A rows"))
        same_shape(tile_where, Rect{0, 0, t.tile.rows, g.a.box.cols}, t.a_rows->box, "A rows (the tile's rows x K)");
      if (!t.addends.empty() && g.accumulate) fail(tile_where, "has addends in a GEMM that accumulates into its stores");
    }
  }

  // The gathered A a plan keeps: ag_gemm's only, boxes of whole K-wide rows, W*M rows in all.
  void gathered_a(const std::string& where, int rank, const RankPlan& rp) {
    if (rp.gathered_a.empty()) return;
    if (plan.problem.op != OpKind::ag_gemm) {
      fail(where, "names where the gathered A lies, but only ag_gemm gathers A");
      return;
    }
    int64_t rows = 0;
    for (const Region& piece : rp.gathered_a) {
      if (!region(where + " gathered A", rank, piece, "piece")) return;
      if (piece.rank != rank) fail(where, "gathered A piece " + describe_region(plan, piece) + " is on another rank");
      if (piece.box.cols != plan.problem.k)
        fail(where, "gathered A piece " + describe_region(plan, piece) + " has " + std::to_string(piece.box.cols) + " columns, not K = " +
                        std::to_string(plan.problem.k));
      rows += piece.box.rows;
    }
    if (rows != plan.problem.world_size * plan.problem.m)
      fail(where, "gathered A pieces hold " + std::to_string(rows) + " rows, not W * M = " + std::to_string(plan.problem.world_size * plan.problem.m));
  }

  // FP8 (ir/scaling.hpp): FP8 rows move only into buffers of their dtype (their scales travel with
  // them), a GEMM multiplies FP8 by FP8 into bf16 or f32, reading block scales from their boundaries,
  // and nothing reduces FP8.
  void fp8(const std::string& where, const StepBody& step) {
    auto fp8_of = [&](const Region& r) {
      const BufferDecl* d = buffer(r);
      return d && is_fp8(d->dtype);
    };
    auto named = [&](const Region& r) {
      const BufferDecl* d = buffer(r);
      return d ? std::string(to_string(d->dtype)) + " buffer '" + d->name + "'" : std::string("a missing buffer");
    };
    auto moves = [&](const Region& src, const Region& dst) {
      const BufferDecl *s = buffer(src), *d = buffer(dst);
      if (s && d && (is_fp8(s->dtype) || is_fp8(d->dtype)) && s->dtype != d->dtype)
        fail(where, "moves " + named(src) + " into " + named(dst) + ": FP8 rows move only with their dtype and scales");
    };
    auto not_reduced = [&](const Region& r) {
      if (fp8_of(r)) fail(where, "reduces " + named(r) + ": partial sums are bf16 or f32, never FP8");
    };
    auto aligned = [&](const Region& r) {
      if (!buffer(r)) return;
      if (std::string why = scale_block_misalignment(plan, r); !why.empty()) fail(where, why);
    };
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, GemmStep>) {
            if (fp8_of(body.a) != fp8_of(body.b)) fail(where, "multiplies " + named(body.a) + " by " + named(body.b) + ": FP8 multiplies only FP8");
            aligned(body.a);
            aligned(body.b);
            for (const GemmTile& t : body.tiles) {
              if (fp8_of(t.store)) fail(where, "stores into " + named(t.store) + ": an FP8 GEMM gives bf16 or f32");
              for (const Region& addend : t.addends) not_reduced(addend);
              if (t.a_rows) {
                if (fp8_of(*t.a_rows) != fp8_of(body.a)) fail(where, "reads A rows from " + named(*t.a_rows) + " beside " + named(body.a));
                aligned(*t.a_rows);
              }
            }
          } else if constexpr (std::is_same_v<T, CopyStep> || std::is_same_v<T, PermuteRowsStep> || std::is_same_v<T, MoveBoxesStep>) {
            moves(body.src, body.dst);
          } else if constexpr (std::is_same_v<T, ReduceStep>) {
            not_reduced(body.dst);
            for (const Region& src : body.srcs) not_reduced(src);
          } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
            for (const Region* r : {&body.src, &body.weights, &body.dst}) not_reduced(*r);
          } else if constexpr (std::is_same_v<T, CollectiveStep>) {
            if (body.kind == CollectiveKind::all_gather || body.kind == CollectiveKind::all_to_all) {
              moves(body.src, body.dst);
            } else {
              not_reduced(body.src);
              not_reduced(body.dst);
            }
          } else if constexpr (std::is_same_v<T, AttentionStep>) {
            for (const Region* r : {&body.q, &body.k, &body.v, &body.o, &body.lse})
              if (fp8_of(*r)) fail(where, "attends over " + named(*r) + ": attention has no FP8 form");
          }
        },
        step);
  }

  // An i32 column of `entries` rows: what index regions and a route's tables are.
  void index_region(const std::string& where, const Region& r, int64_t entries, const char* each) {
    const BufferDecl* d = buffer(r);
    if (!d) return;
    if (d->dtype != DType::i32 || r.box.cols != 1 || r.box.rows != entries)
      fail(where, "index region " + describe_region(plan, r) + " is " + std::string(to_string(d->dtype)) + " [" + std::to_string(r.box.rows) + "x" +
                      std::to_string(r.box.cols) + "]; it must be i32 [" + std::to_string(entries) + "x1], one entry per " + each);
  }

  // The route (RouteStep): the choices of every token, and its tables sized for any routing.
  void route(const std::string& where, int rank, const RouteStep& s) {
    const Problem& p = plan.problem;
    if (!is_moe(p.op) || !p.routing_on_device) {
      fail(where, "routes MoE choices, but the problem takes no choices on the device");
      return;
    }
    if (s.experts != p.experts || s.topk != p.topk || s.align < 1)
      fail(where, "routes " + std::to_string(s.experts) + " experts, top " + std::to_string(s.topk) + " (align " + std::to_string(s.align) +
                      ") for a problem of " + std::to_string(p.experts) + ", top " + std::to_string(p.topk));
    const int64_t tokens = int64_t{p.world_size} * p.m, pairs = tokens * p.topk;
    const int64_t capacity = moe_route_capacity(p.world_size, p.m, p.topk, s.experts, s.align);
    bool ok = region(where, rank, s.choices, "choices");
    for (const Region* r : {&s.scratch_source, &s.expert_first}) ok = region(where, rank, *r, "table") && ok;
    if (s.layout_scratch) ok = region(where, rank, *s.layout_scratch, "table") && ok;
    if (s.pair_scratch) ok = region(where, rank, *s.pair_scratch, "table") && ok;
    if (!ok) return;
    if (const BufferDecl* d = buffer(s.choices); d->dtype != DType::i32 || s.choices.box.rows != tokens || s.choices.box.cols != p.topk)
      fail(where, "choices " + describe_region(plan, s.choices) + " must be i32 [W * M, topk] = [" + std::to_string(tokens) + "x" +
                      std::to_string(p.topk) + "]");
    index_region(where, s.scratch_source, capacity, "row of the expert-major scratch");
    index_region(where, s.expert_first, int64_t{s.experts} + 1, "expert and one more");
    if (s.layout_scratch) index_region(where, *s.layout_scratch, pairs, "row of the op layout");
    if (s.pair_scratch) index_region(where, *s.pair_scratch, pairs, "(token, choice)");
  }

  // Index tables come from a route of the same rank and are read as what they are: a permute by a
  // route's scratch_source fills the expert-major scratch from the rows its source names (the gathered
  // tokens, or the op layout's rows), one by layout_scratch fills the op layout from the scratch, a
  // combine by pair_scratch reads the scratch per (token, choice); a routed GEMM reads the scratch of
  // a route whose experts start on its tile grid, and stores apart from what it reads. (A table read
  // as another holds rows of another range: out of bounds on the GPU.)
  void routed_tables(const std::string& where, const StepBody& step) {
    const Problem& p = plan.problem;
    const int64_t tokens = int64_t{p.world_size} * p.m, pairs = tokens * p.topk;
    auto capacity = [&](const RouteStep& r) { return moe_route_capacity(p.world_size, p.m, p.topk, r.experts, r.align); };
    auto writes = [&](const Region& index, auto member) -> const RouteStep* {
      for (const RouteStep* r : routes_)
        if (member(*r) && *member(*r) == index) return r;
      return nullptr;
    };
    auto rows_must = [&](const Region& r, int64_t rows, const std::string& what) {
      if (r.box.rows != rows)
        fail(where, what + " " + describe_region(plan, r) + " has " + std::to_string(r.box.rows) + " rows; the route's table is for " + std::to_string(rows));
    };
    if (const auto* permute = std::get_if<PermuteRowsStep>(&step); permute && permute->index) {
      if (const RouteStep* r = writes(*permute->index, [](const RouteStep& x) { return std::optional<Region>(x.scratch_source); })) {
        rows_must(permute->dst, capacity(*r), "the destination");
        rows_must(permute->src, r->source == RouteSource::token ? tokens : pairs, r->source == RouteSource::token ? "the tokens" : "the op layout");
      } else if (const RouteStep* l = writes(*permute->index, [](const RouteStep& x) { return x.layout_scratch; })) {
        rows_must(permute->src, capacity(*l), "the scratch");
        rows_must(permute->dst, pairs, "the op layout");
      } else {
        fail(where, "permutes by " + describe_region(plan, *permute->index) + ", which no route of this rank writes as a row table");
      }
    } else if (const auto* combine = std::get_if<CombineRowsStep>(&step); combine && combine->index) {
      if (const RouteStep* r = writes(*combine->index, [](const RouteStep& x) { return x.pair_scratch; })) {
        rows_must(combine->src, capacity(*r), "the scratch");
        rows_must(combine->dst, tokens, "the tokens");
      } else {
        fail(where, "combines by " + describe_region(plan, *combine->index) + ", which no route of this rank writes as its (token, choice) table");
      }
    } else if (const auto* gemm = std::get_if<GemmStep>(&step); gemm && gemm->routed) {
      const RoutedGemm& routed = *gemm->routed;
      const RouteStep* r = writes(routed.expert_first, [](const RouteStep& x) { return std::optional<Region>(x.expert_first); });
      if (!r) {
        fail(where, "a routed GEMM reads expert_first " + describe_region(plan, routed.expert_first) + ", which no route of this rank writes");
      } else {
        if (r->experts != routed.experts) fail(where, "a routed GEMM over " + std::to_string(routed.experts) + " experts reads a route of " + std::to_string(r->experts));
        if (gemm->tile_m < 1 || r->align % gemm->tile_m != 0)
          fail(where, "a routed GEMM on " + std::to_string(gemm->tile_m) + "-row tiles reads a route aligned to " + std::to_string(r->align) +
                          " rows: an expert would start inside a tile");
        rows_must(gemm->a, capacity(*r), "operand a");
      }
      auto overlaps = [](const Region& x, const Region& y) {
        return x.rank == y.rank && x.buffer == y.buffer && x.box.row < y.box.row_end() && y.box.row < x.box.row_end() && x.box.col < y.box.col_end() &&
               y.box.col < x.box.col_end();
      };
      for (const Region* read : {&gemm->a, &gemm->b, &routed.expert_first})
        if (overlaps(routed.out, *read)) fail(where, "a routed GEMM stores into " + describe_region(plan, routed.out) + ", which it also reads");
    }
  }

  // i32 holds indices: only routes, index regions, a routed GEMM's expert_first and the copies and
  // all-gathers that move them touch it, and those regions are i32.
  void indices(const std::string& where, const StepBody& step) {
    auto i32 = [&](const Region& r) {
      const BufferDecl* d = buffer(r);
      return d && d->dtype == DType::i32;
    };
    std::vector<Region> allowed;
    if (const auto* c = std::get_if<CopyStep>(&step)) {
      if (i32(c->src) != i32(c->dst)) fail(where, "copies between i32 indices and data");
      return;
    }
    if (const auto* c = std::get_if<CollectiveStep>(&step)) {
      if ((i32(c->src) || i32(c->dst)) && (c->kind != CollectiveKind::all_gather || !i32(c->src) || !i32(c->dst)))
        fail(where, "a collective over i32 indices other than an all_gather of indices into indices");
      return;
    }
    if (std::holds_alternative<RouteStep>(step)) return;  // route() checks its regions
    if (const auto* p = std::get_if<PermuteRowsStep>(&step); p && p->index) allowed.push_back(*p->index);
    if (const auto* c = std::get_if<CombineRowsStep>(&step); c && c->index) allowed.push_back(*c->index);
    if (const auto* g = std::get_if<GemmStep>(&step); g && g->routed) allowed.push_back(g->routed->expert_first);
    for (const Region& r : regions_of(step))
      if (i32(r) && std::find(allowed.begin(), allowed.end(), r) == allowed.end())
        fail(where, "touches i32 buffer '" + buffer(r)->name + "' as data; i32 holds indices");
  }

  void attention(const std::string& where, int rank, const AttentionStep& s) {
    bool ok = region(where, rank, s.q, "queries");
    ok = region(where, rank, s.k, "keys") && ok;
    ok = region(where, rank, s.v, "values") && ok;
    ok = region(where, rank, s.o, "output") && ok;
    ok = region(where, rank, s.lse, "log-sum-exp") && ok;
    if (!ok) return;
    if (s.head_dim < 1 || s.tile_q < 1 || s.sm_limit < 0) {
      fail(where, "head_dim (" + std::to_string(s.head_dim) + ") and tile_q (" + std::to_string(s.tile_q) + ") must be positive and sm_limit (" +
                      std::to_string(s.sm_limit) + ") 0 (all SMs) or positive");
      return;
    }
    if (s.q.box.cols % s.head_dim != 0 || s.k.box.cols % s.head_dim != 0) {
      fail(where, "queries have " + std::to_string(s.q.box.cols) + " columns and keys " + std::to_string(s.k.box.cols) +
                      ": both must be whole heads of head_dim " + std::to_string(s.head_dim));
      return;
    }
    const int64_t heads = s.q.box.cols / s.head_dim, kv_heads = s.k.box.cols / s.head_dim;
    if (kv_heads < 1 || heads % kv_heads != 0)
      fail(where, std::to_string(heads) + " query heads cannot share " + std::to_string(kv_heads) +
                      " key/value heads evenly (query heads must be a multiple of key/value heads)");
    same_shape(where, s.k.box, s.v.box, "values against keys");
    same_shape(where, s.q.box, s.o.box, "output against queries");
    same_shape(where, Rect{0, 0, s.q.box.rows, heads}, s.lse.box, "log-sum-exp (query rows x query heads)");
    if (const BufferDecl* lse = buffer(s.lse); lse->dtype != DType::f32)
      fail(where, "log-sum-exp buffer '" + lse->name + "' is " + std::string(to_string(lse->dtype)) +
                      "; declare it f32 (merged partial results are only as exact as their log-sum-exp)");
    if (s.q_position < 0 || s.kv_position < 0)
      fail(where, "token positions must be >= 0, got q_position " + std::to_string(s.q_position) + " and kv_position " + std::to_string(s.kv_position));
    std::vector<std::pair<int64_t, int64_t>> spans;  // [row, row_end) of every KV tile
    for (size_t i = 0; i < s.kv_tiles.size(); ++i) {
      const KvTile& t = s.kv_tiles[i];
      const std::string tile_where = where + " KV tile " + std::to_string(i);
      if (t.rows < 1 || t.row < 0 || t.row + t.rows > s.k.box.rows)
        fail(tile_where, "rows [" + std::to_string(t.row) + ", " + std::to_string(t.row + t.rows) + ") are empty or outside the " +
                             std::to_string(s.k.box.rows) + " key rows");
      if (t.wait) signal(tile_where, t.wait->signal, rank, true);
      spans.push_back({t.row, t.row + t.rows});
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second)
        fail(where, "KV tiles overlap at key row " + std::to_string(spans[i].first) + " (each key may be read once: it would count twice)");
    // Keys left out of every KV tile must be masked for every query: those after the last query's
    // position, where causal.
    const int64_t needed = s.q.box.rows == 0 ? 0
                           : s.causal       ? std::clamp<int64_t>(s.q_position + s.q.box.rows - s.kv_position, 0, s.k.box.rows)
                                            : s.k.box.rows;
    int64_t covered = 0;
    for (const auto& [first, end] : spans) {
      if (first > covered) break;
      covered = std::max(covered, end);
    }
    if (covered < needed)
      fail(where, "key row " + std::to_string(covered) + " of " + describe_region(plan, s.k) + " is in no KV tile but " +
                      (s.causal ? "the step's last query (position " + std::to_string(s.q_position + s.q.box.rows - 1) + ") sees it (position " +
                                      std::to_string(s.kv_position + covered) + ")"
                                : std::string("a step that is not causal sees every key")) +
                      "; leave out only keys masked for every query");
  }

  std::vector<const RouteStep*> routes_;  // the routes of the rank being checked

  void run() {
    if (plan.ranks.empty()) {
      fail("plan", "has no ranks");
      return;
    }
    if (plan.world_size() != plan.problem.world_size)
      fail("plan", "has " + std::to_string(plan.world_size()) + " ranks but the problem's world size is " +
                       std::to_string(plan.problem.world_size));
    std::map<int, std::vector<std::pair<int, const CollectiveStep*>>> collectives;
    for (int rank = 0; rank < plan.world_size(); ++rank) {
      const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
      const std::string rank_where = "rank " + std::to_string(rank);
      if (rp.rank != rank) fail(rank_where, "is labelled rank " + std::to_string(rp.rank));
      if (rp.stream_count < 1) fail(rank_where, "has no streams");
      // Symmetric buffers must be declared alike everywhere: peers compute addresses from their own copy.
      for (size_t b = 0; b < rp.buffers.size(); ++b) {
        const auto& decl = rp.buffers[b];
        if (decl.rows < 0 || decl.cols < 0) fail(rank_where, "buffer '" + decl.name + "' has a negative size");
        if (decl.symmetric) {
          const auto& peers0 = plan.ranks[0].buffers;
          if (b >= peers0.size() || !(peers0[b] == decl))
            fail(rank_where, "symmetric buffer '" + decl.name + "' (#" + std::to_string(b) +
                                 ") is not declared identically on rank 0");
        }
      }
      region(rank_where + " output", rank, rp.output, "output");
      gathered_a(rank_where, rank, rp);
      if (auto* decl = buffer(rp.output); decl && decl->role != BufferRole::output)
        fail(rank_where, "output region lies in buffer '" + decl->name + "', which is not an output buffer");
      routes_.clear();
      for (const Step& step : rp.steps)
        if (const auto* route = std::get_if<RouteStep>(&step.body)) routes_.push_back(route);
      for (size_t s = 0; s < rp.steps.size(); ++s) {
        const Step& step = rp.steps[s];
        const std::string where = rank_where + " step " + std::to_string(s) + " '" + step.label + "'";
        if (step.stream < 0 || step.stream >= rp.stream_count)
          fail(where, "runs on stream " + std::to_string(step.stream) + " of " + std::to_string(rp.stream_count));
        for (const auto& w : step.waits) signal(where, w.signal, rank, true);
        for (const auto& n : step.notifies) signal(where, n.signal, rank, false);
        std::visit(
            [&](const auto& body) {
              using T = std::decay_t<decltype(body)>;
              if constexpr (std::is_same_v<T, GemmStep>) {
                gemm(where, rank, body);
              } else if constexpr (std::is_same_v<T, CopyStep>) {
                if (region(where, rank, body.src, "src") && region(where, rank, body.dst, "dst"))
                  same_shape(where, body.src.box, body.dst.box, "copy");
              } else if constexpr (std::is_same_v<T, ReduceStep>) {
                if (body.srcs.empty() && !body.accumulate) fail(where, "reduces nothing");
                if (region(where, rank, body.dst, "dst"))
                  for (const auto& src : body.srcs)
                    if (region(where, rank, src, "src")) same_shape(where, src.box, body.dst.box, "reduce");
              } else if constexpr (std::is_same_v<T, PermuteRowsStep>) {
                if (body.index) {
                  if (region(where, rank, body.src, "src") && region(where, rank, body.dst, "dst") && region(where, rank, *body.index, "index")) {
                    if (body.src.box.cols != body.dst.box.cols) fail(where, "permute changes the column count");
                    if (!body.source_rows.empty()) fail(where, "permute lists its rows and reads them from an index region too");
                    index_region(where, *body.index, body.dst.box.rows, "a row of the destination");
                  }
                } else if (region(where, rank, body.src, "src") && region(where, rank, body.dst, "dst")) {
                  if (body.src.box.cols != body.dst.box.cols) fail(where, "permute changes the column count");
                  if (static_cast<int64_t>(body.source_rows.size()) != body.dst.box.rows)
                    fail(where, "permute lists " + std::to_string(body.source_rows.size()) + " rows for a destination of " +
                                    std::to_string(body.dst.box.rows));
                  for (int64_t r : body.source_rows)
                    if (r < 0 || r >= body.src.box.rows) {
                      fail(where, "permute reads source row " + std::to_string(r) + " outside the source");
                      break;
                    }
                }
              } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
                if (region(where, rank, body.src, "src") && region(where, rank, body.dst, "dst") &&
                    region(where, rank, body.weights, "weights")) {
                  if (body.src.box.cols != body.dst.box.cols) fail(where, "combine changes the column count");
                  if (body.topk < 1 || body.weights.box.cols != body.topk || body.weights.box.rows != body.dst.box.rows)
                    fail(where, "combine needs a [dst rows, topk] weights box");
                  if (body.index) {
                    if (!body.source_rows.empty()) fail(where, "combine lists its rows and reads them from an index region too");
                    if (region(where, rank, *body.index, "index")) index_region(where, *body.index, body.dst.box.rows * body.topk, "a (row, choice)");
                  } else if (static_cast<int64_t>(body.source_rows.size()) != body.dst.box.rows * body.topk)
                    fail(where, "combine lists " + std::to_string(body.source_rows.size()) + " rows for " + std::to_string(body.dst.box.rows) +
                                    " destination rows of top " + std::to_string(body.topk));
                  for (int64_t r : body.source_rows)
                    if (r < 0 || r >= body.src.box.rows) {
                      fail(where, "combine reads source row " + std::to_string(r) + " outside the source");
                      break;
                    }
                }
              } else if constexpr (std::is_same_v<T, MoveBoxesStep>) {
                if (region(where, rank, body.src, "src") && region(where, rank, body.dst, "dst")) {
                  const Rect src_frame{0, 0, body.src.box.rows, body.src.box.cols};
                  const Rect dst_frame{0, 0, body.dst.box.rows, body.dst.box.cols};
                  for (const BoxMove& move : body.moves) {
                    if (move.from.rows != move.to.rows || move.from.cols != move.to.cols || move.from.empty()) {
                      fail(where, "a box move changes shape or moves nothing");
                      break;
                    }
                    if (!contains(src_frame, move.from) || !contains(dst_frame, move.to)) {
                      fail(where, "a box move reaches outside its source or destination box");
                      break;
                    }
                  }
                }
              } else if constexpr (std::is_same_v<T, AttentionStep>) {
                attention(where, rank, body);
              } else if constexpr (std::is_same_v<T, RouteStep>) {
                route(where, rank, body);
              } else if constexpr (std::is_same_v<T, CollectiveStep>) {
                if (body.src.rank != rank || body.dst.rank != rank)
                  fail(where, "a collective's src and dst must be on its own rank");
                region(where, rank, body.src, "src");
                region(where, rank, body.dst, "dst");
                collectives[body.id].push_back({rank, &body});
              }
            },
            step.body);
        fp8(where, step.body);
        indices(where, step.body);
        routed_tables(where, step.body);
      }
    }
    for (const auto& [id, parts] : collectives) check_collective(id, parts);
    for (int rank = 0; rank < plan.world_size(); ++rank) check_companions(rank);
  }

  // A companion group is one launch: its steps are SM copies or reductions, on one stream, with no
  // other step of that stream between them.
  void check_companions(int rank) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(rank)];
    std::map<int, int> stream_of, last_position;  // companion id -> stream, position in its stream
    std::map<int, int> position_in_stream;        // stream -> steps seen
    for (size_t s = 0; s < rp.steps.size(); ++s) {
      const Step& step = rp.steps[s];
      const int position = position_in_stream[step.stream]++;
      if (step.companion < 0) continue;
      const std::string where = "rank " + std::to_string(rank) + " step " + std::to_string(s) + " '" + step.label + "'";
      if (step.engine != Engine::sm || !(std::holds_alternative<CopyStep>(step.body) || std::holds_alternative<ReduceStep>(step.body) ||
                                         std::holds_alternative<JoinStep>(step.body)))
        fail(where, "is in companion #" + std::to_string(step.companion) + " but is not a copy, a reduction or a join on SMs");
      const auto it = stream_of.find(step.companion);
      if (it == stream_of.end()) {
        stream_of[step.companion] = step.stream;
      } else if (it->second != step.stream) {
        fail(where, "is in companion #" + std::to_string(step.companion) + " on stream " + std::to_string(step.stream) +
                        ", whose other steps run on stream " + std::to_string(it->second));
      } else if (last_position[step.companion] != position - 1) {
        fail(where, "is in companion #" + std::to_string(step.companion) + " but another step of stream " + std::to_string(step.stream) +
                        " comes between it and the group's previous step (a companion is one launch)");
      }
      last_position[step.companion] = position;
    }
  }

  void check_collective(int id, const std::vector<std::pair<int, const CollectiveStep*>>& parts) {
    const std::string where = "collective #" + std::to_string(id);
    const int world = plan.world_size();
    std::vector<const CollectiveStep*> by_rank(static_cast<size_t>(world), nullptr);
    for (auto [rank, step] : parts) {
      if (by_rank[static_cast<size_t>(rank)]) {
        fail(where, "is joined twice by rank " + std::to_string(rank));
        return;
      }
      by_rank[static_cast<size_t>(rank)] = step;
    }
    for (int r = 0; r < world; ++r)
      if (!by_rank[static_cast<size_t>(r)]) {
        fail(where, "is never joined by rank " + std::to_string(r) + " (every rank must join; a missing rank hangs NCCL)");
        return;
      }
    const CollectiveStep& first = *by_rank[0];
    for (int r = 0; r < world; ++r) {
      const CollectiveStep& c = *by_rank[static_cast<size_t>(r)];
      const std::string rw = where + " on rank " + std::to_string(r);
      if (c.kind != first.kind) {
        fail(rw, std::string("is ") + std::string(to_string(c.kind)) + " but rank 0 calls " + std::string(to_string(first.kind)));
        continue;
      }
      if (c.src.box.cols != first.src.box.cols || c.dst.box.cols != c.src.box.cols)
        fail(rw, "column counts differ across ranks or between src and dst");
      switch (c.kind) {
        case CollectiveKind::all_gather:
          if (c.src.box.rows != first.src.box.rows || c.dst.box.rows != world * c.src.box.rows)
            fail(rw, "all_gather needs equal src rows on all ranks and dst rows = world x src rows");
          break;
        case CollectiveKind::reduce_scatter:
          if (c.dst.box.rows != first.dst.box.rows || c.src.box.rows != world * c.dst.box.rows)
            fail(rw, "reduce_scatter needs equal dst rows on all ranks and src rows = world x dst rows");
          break;
        case CollectiveKind::all_reduce:
          if (c.src.box != first.src.box || c.dst.box.rows != c.src.box.rows)
            fail(rw, "all_reduce needs the same shape on every rank");
          break;
        case CollectiveKind::all_to_all: {
          if (static_cast<int>(c.send_rows.size()) != world || static_cast<int>(c.recv_rows.size()) != world) {
            fail(rw, "all_to_all needs one send and one receive count per rank");
            break;
          }
          int64_t sent = 0, received = 0;
          for (int p = 0; p < world; ++p) {
            sent += c.send_rows[static_cast<size_t>(p)];
            received += c.recv_rows[static_cast<size_t>(p)];
          }
          if (sent != c.src.box.rows || received != c.dst.box.rows)
            fail(rw, "all_to_all counts (" + std::to_string(sent) + " sent, " + std::to_string(received) +
                         " received) do not match src/dst rows");
          break;
        }
      }
    }
    if (first.kind == CollectiveKind::all_to_all)
      for (int s = 0; s < world; ++s)
        for (int d = 0; d < world; ++d) {
          const auto& cs = *by_rank[static_cast<size_t>(s)];
          const auto& cd = *by_rank[static_cast<size_t>(d)];
          if (cs.send_rows.size() != static_cast<size_t>(world) || cd.recv_rows.size() != static_cast<size_t>(world)) return;
          if (cs.send_rows[static_cast<size_t>(d)] != cd.recv_rows[static_cast<size_t>(s)])
            fail(where, "rank " + std::to_string(s) + " sends " + std::to_string(cs.send_rows[static_cast<size_t>(d)]) +
                            " rows to rank " + std::to_string(d) + ", which expects " +
                            std::to_string(cd.recv_rows[static_cast<size_t>(s)]));
        }
  }
};

}  // namespace

void check_structure(const Plan& plan, ValidationReport& report) { StructureChecker{plan, report}.run(); }

}  // namespace weft::detail
