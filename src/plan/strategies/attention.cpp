// ag_attention's plans: sequence-parallel self-attention (ir/problem.hpp has the layout), queries
// sharded by sequence, keys and values sharded by sequence and gathered. Every plan computes into O
// with an AttentionStep (ir/plan.hpp); the score tile S = Q K^T is options.tile_m queries (the step's
// tile_q) by options.tile_n keys (its KV tiles), the GEMM tile's two sides. Where the keys are causal,
// a rank reads no block after its own: every key there is later than every query it holds.
//
//   sequential (baseline): NCCL all_gather of K, then of V, then one attention step over all the
//        keys, in sequence order.
//   decomposed (RingAttention, autooverlap.txt's Ring-Attn): attention over the own keys and values
//        where the caller has them, while the copy engine pulls each peer's block in ring order (rank
//        r + 1 first, so that no two ranks pull from one peer at once), each raising a counter of its
//        own twice (K and V); an attention step per pulled block follows its counter and merges its
//        partial result into O by the log-sum-exp both carry.
//   tilelink (tilelink.txt §5.3, Figure 6): one attention step whose KV tiles each wait for the pull
//        of their rows, so that no query tile waits for keys it does not read yet. The copy engine
//        moves the keys and values on the communication stream in communication tiles
//        (TileLinkOptions::comm_tile_rows; 0: a rank's whole block, the paper's S / WORLD_SIZE), a
//        counter per communication tile (one per tile, not cumulative, so that pulls may complete in
//        any order); the own block is copied into the gathered buffer first, on the attention
//        kernel's stream before it (a local copy is a kernel), so that the first KV tiles are in at
//        once. No companion kernel: the copy engine's pulls leave every SM to the attention kernel,
//        which is compute bound.
#include "attention.hpp"

#include <algorithm>
#include <stdexcept>

#include "weft/ir/tile_map.hpp"

namespace weft {

using detail::RankPlanBuilder;

namespace {

constexpr int kCompute = 0;
constexpr int kComm = 1;

struct AttentionOperands {
  BufferId q, k, v, o, lse;
};

// Q, K and V where the caller has them (K and V symmetric where peers pull them), O, and the f32
// log-sum-exp every attention step writes beside O.
AttentionOperands declare_operands(const Problem& p, RankPlanBuilder& b, bool peers_pull) {
  AttentionOperands x{};
  x.q = b.buffer("Q", BufferRole::input, p.m, query_cols(p), p.input_dtype);
  x.k = b.buffer("K", BufferRole::input, p.m, key_cols(p), p.input_dtype, peers_pull);
  x.v = b.buffer("V", BufferRole::input, p.m, key_cols(p), p.input_dtype, peers_pull);
  x.o = b.buffer("O", BufferRole::output, p.m, query_cols(p), p.output_dtype);
  x.lse = b.buffer("LSE", BufferRole::scratch, p.m, lse_cols(p), DType::f32);
  return x;
}

// Every rank's keys and values in sequence order: rank s's block at rows s * m.
std::pair<BufferId, BufferId> declare_gathered(const Problem& p, RankPlanBuilder& b) {
  const int64_t rows = p.world_size * p.m;
  return {b.buffer("K_gathered", BufferRole::scratch, rows, key_cols(p), p.input_dtype),
          b.buffer("V_gathered", BufferRole::scratch, rows, key_cols(p), p.input_dtype)};
}

// This rank's queries over keys `k` and values `v` whose first row is token `kv_position`, into O and
// LSE; no KV tiles yet.
AttentionStep attention_over(const Problem& p, const PlanOptions& o, const RankPlanBuilder& b, const AttentionOperands& x, const Region& k,
                             const Region& v, int64_t kv_position) {
  AttentionStep s;
  s.q = b.whole(x.q);
  s.k = k;
  s.v = v;
  s.o = b.whole(x.o);
  s.lse = b.whole(x.lse);
  s.head_dim = p.head_dim;
  s.tile_q = o.tile_m;
  s.q_position = static_cast<int64_t>(b.rank()) * p.m;
  s.kv_position = kv_position;
  s.causal = p.causal;
  return s;
}

// KV tiles of at most tile_rows (the options' tile_n) rows over rows [first, first + rows) of the
// step's keys, each waiting for `wait` where given.
void add_kv_tiles(AttentionStep& s, int64_t first, int64_t rows, int tile_rows, const std::optional<Wait>& wait = std::nullopt) {
  if (tile_rows < 1) throw std::invalid_argument("ag_attention: the KV tile (tile_n) must be positive, got " + std::to_string(tile_rows));
  for (int64_t row = first; row < first + rows; row += tile_rows) s.kv_tiles.push_back({row, std::min<int64_t>(tile_rows, first + rows - row), wait});
}

// Whether rank r's queries read any key of rank s's block: every block, or with causal masking the
// blocks up to r's own (a later block holds only keys after all of r's queries).
bool reads_block(const Problem& p, int r, int s) { return !p.causal || s <= r; }

// The peers whose blocks rank r reads, in ring order: at step i every rank pulls from the rank i
// after it, so no two ranks pull from one peer at once.
std::vector<int> peers_in_ring_order(const Problem& p, int r) {
  std::vector<int> peers;
  for (int i = 1; i < p.world_size; ++i)
    if (const int s = (r + i) % p.world_size; reads_block(p, r, s)) peers.push_back(s);
  return peers;
}

}  // namespace

namespace detail {

void build_attention_gathered(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int r = b.rank();
  const AttentionOperands x = declare_operands(p, b, /*peers_pull=*/false);
  const auto [k, v] = declare_gathered(p, b);
  b.add("all_gather K", kCompute, Engine::nccl, CollectiveStep{CollectiveKind::all_gather, 0, b.whole(x.k), b.whole(k), {}, {}});
  b.add("all_gather V", kCompute, Engine::nccl, CollectiveStep{CollectiveKind::all_gather, 1, b.whole(x.v), b.whole(v), {}, {}});
  AttentionStep step = attention_over(p, o, b, x, b.whole(k), b.whole(v), 0);
  for (int s = 0; s < p.world_size; ++s)
    if (reads_block(p, r, s)) add_kv_tiles(step, s * p.m, p.m, o.tile_n);
  b.add("attention", kCompute, Engine::sm, std::move(step));
  b.set_output(b.whole(x.o));
}

void build_attention_ring(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  if (o.all_gather_source == AllGatherSource::push)
    throw std::invalid_argument("decomposed ag_attention pulls each peer's keys and values (pull); push is built for ag_gemm only");
  const int r = b.rank();
  const AttentionOperands x = declare_operands(p, b, /*peers_pull=*/true);
  const auto [k, v] = declare_gathered(p, b);  // the own block's rows stay unused: it is read in place
  AttentionStep own = attention_over(p, o, b, x, b.whole(x.k), b.whole(x.v), static_cast<int64_t>(r) * p.m);
  add_kv_tiles(own, 0, p.m, o.tile_n);
  b.add("attention over own keys", kCompute, Engine::sm, std::move(own));
  for (const int s : peers_in_ring_order(p, r)) {
    const SignalId arrived = b.signal("block" + std::to_string(s) + "_arrived");
    for (const auto& [name, from, into] : {std::tuple{"K", x.k, k}, std::tuple{"V", x.v, v}}) {
      Step& pull = b.add(std::string("pull ") + name + " of rank " + std::to_string(s), kComm, Engine::copy_engine,
                         CopyStep{b.whole(from, s), b.rows(into, s * p.m, p.m)});
      pull.notifies.push_back({b.own(arrived), 1});
    }
    AttentionStep step = attention_over(p, o, b, x, b.rows(k, s * p.m, p.m), b.rows(v, s * p.m, p.m), static_cast<int64_t>(s) * p.m);
    step.merge = true;
    add_kv_tiles(step, 0, p.m, o.tile_n);
    Step& attend = b.add("attention over rank " + std::to_string(s) + "'s keys, merged", kCompute, Engine::sm, std::move(step));
    attend.waits.push_back({b.own(arrived), 2});  // its K and its V
  }
  b.set_output(b.whole(x.o));
}

void build_attention_tile_waits(const Problem& p, const PlanOptions& o, RankPlanBuilder& b) {
  const int r = b.rank();
  const AttentionOperands x = declare_operands(p, b, /*peers_pull=*/true);
  const auto [k, v] = declare_gathered(p, b);
  const int64_t comm_rows = o.tilelink.comm_tile_rows > 0 ? std::min(o.tilelink.comm_tile_rows, p.m) : p.m;
  const tile::StaticTileMap map{p.world_size, p.m, comm_rows};
  AttentionStep step = attention_over(p, o, b, x, b.whole(k), b.whole(v), 0);
  // The own block first, copied into place on the attention kernel's stream before it: a copy within
  // one GPU runs as a kernel, which would find no free SM once the attention kernel, holding them
  // all, waits for it (checks/sm_holding.cpp). Its KV tiles then wait for nothing.
  for (const auto& [name, from, into] : {std::tuple{"K", x.k, k}, std::tuple{"V", x.v, v}})
    b.add(std::string("copy own ") + name, kCompute, Engine::sm, CopyStep{b.whole(from), b.rows(into, static_cast<int64_t>(r) * p.m, p.m)});
  add_kv_tiles(step, static_cast<int64_t>(r) * p.m, p.m, o.tile_n);
  for (const int s : peers_in_ring_order(p, r))
    for (int channel = 0; channel < map.channels(); ++channel) {
      const tile::TileCoord t = map(s * map.channels() + channel);
      const SignalId arrived = b.signal("rank" + std::to_string(s) + "_tile" + std::to_string(channel) + "_arrived");
      for (const auto& [name, from, into] : {std::tuple{"K", x.k, k}, std::tuple{"V", x.v, v}}) {
        Step& move = b.add(std::string("pull ") + name + " of rank " + std::to_string(s) + " tile " + std::to_string(channel), kComm,
                           Engine::copy_engine, CopyStep{b.rows(from, t.row - static_cast<int64_t>(s) * p.m, t.rows, s), b.rows(into, t.row, t.rows)});
        move.notifies.push_back({b.own(arrived), 1});
      }
      add_kv_tiles(step, t.row, t.rows, o.tile_n, Wait{b.own(arrived), 2});  // its K and its V
    }
  b.add("attention (KV tiles wait for their pulls)", kCompute, Engine::sm, std::move(step));
  b.set_output(b.whole(x.o));
}

}  // namespace detail

Plan plan_attention_alone(const Problem& p, const PlanOptions& options, const std::string& strategy) {
  check_problem(p);
  if (!is_attention(p.op) || p.world_size != 1)
    throw std::invalid_argument("plan_attention_alone: " + describe(p) + " is not ag_attention at world 1; only a world of one runs its attention alone");
  Plan plan;
  plan.strategy = strategy;
  plan.problem = p;
  RankPlanBuilder b(0, 1);
  const AttentionOperands x = declare_operands(p, b, /*peers_pull=*/false);
  AttentionStep step = attention_over(p, options, b, x, b.whole(x.k), b.whole(x.v), 0);
  add_kv_tiles(step, 0, p.m, options.tile_n);
  b.add("attention (world 1: nothing to gather)", kCompute, Engine::sm, std::move(step));
  b.set_output(b.whole(x.o));
  plan.ranks.push_back(b.finish());
  return plan;
}

}  // namespace weft
