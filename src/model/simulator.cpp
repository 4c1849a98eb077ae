#include "weft/model/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <sstream>

#include "common/json.hpp"
#include "weft/model/tiling.hpp"

namespace weft {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-12;


// One GEMM or attention step being simulated: its entries (GEMM tiles, K splits of tiles, or the
// unmasked KV tiles of an attention kernel's query tiles) on its CTAs.
struct GemmRun {
  int rank = 0;
  int step = 0;
  struct Entry {
    double seconds = 0;
    std::optional<Wait> wait;
    std::optional<Notify> notify;  // on the last split of a tile only
  };
  std::vector<Entry> entries;
  int grid = 1;
  // Per CTA: the entries it runs, in order (a GEMM's CTA c takes c, c + grid, ...; an attention
  // kernel's CTA walks the KV tiles of its query tiles one after another), and its position there.
  std::vector<std::vector<size_t>> queue;
  std::vector<size_t> next;
  std::vector<bool> running;
  size_t done = 0;
  bool holds_every_sm = false;
};

struct Transfer {
  int rank = 0, step = 0;  // the copy step
  int from = 0, to = 0;    // GPUs
  bool peer = false;
  double cap = 0;          // bytes/s this transfer can reach alone
  double remaining = 0;    // bytes
  double rate = 0;
};

struct Event {
  double time;
  int kind;  // 0 step done, 1 GEMM entry done
  int rank, step, cta;
  bool operator>(const Event& o) const { return time > o.time; }
};

class Simulator {
 public:
  Simulator(const Plan& plan, const MachineProfile& machine) : plan_(plan), m_(machine) {
    const int world = plan.world_size();
    ranks_.resize(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
      Rank& rk = ranks_[static_cast<size_t>(r)];
      rk.streams.resize(static_cast<size_t>(rp.stream_count));
      for (size_t i = 0; i < rp.steps.size(); ++i) rk.streams[static_cast<size_t>(rp.steps[i].stream)].steps.push_back(static_cast<int>(i));
      rk.signals.assign(rp.signals.size(), 0);
      rk.end = 0;
    }
  }

  Simulation run() {
    now_ = reaches_across_ranks(plan_) ? m_.barrier_seconds : 0.0;
    for (;;) {
      while (try_start()) {
      }
      double next = events_.empty() ? kNever : events_.top().time;
      for (const Transfer& t : transfers_)
        if (t.rate > 0) next = std::min(next, now_ + t.remaining / t.rate);
      if (next == kNever) break;
      advance_transfers(next);
      now_ = next;
      finish_transfers();
      while (!events_.empty() && events_.top().time <= now_ + kEpsilon) {
        const Event e = events_.top();
        events_.pop();
        if (e.kind == 0) complete_step(e.rank, e.step);
        else complete_entry(e.rank, e.cta);
      }
    }
    Simulation out;
    std::ostringstream stuck;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Rank& rk = ranks_[r];
      out.rank_seconds.push_back(rk.end);
      out.seconds = std::max(out.seconds, rk.end);
      for (size_t s = 0; s < rk.streams.size(); ++s) {
        const StreamState& st = rk.streams[s];
        if (st.next < st.steps.size()) {
          const Step& step = plan_.ranks[r].steps[static_cast<size_t>(st.steps[st.next])];
          stuck << "rank " << r << " stream " << s << " stopped at '" << step.label << "'";
          for (const Wait& w : step.waits)
            if (signal(w.signal) < w.value) stuck << " waiting for " << describe_signal(plan_, w.signal) << " >= " << w.value;
          stuck << "\n";
        }
      }
    }
    out.stuck = stuck.str();
    out.steps = std::move(intervals_);
    std::sort(out.steps.begin(), out.steps.end(), [](const SimulatedStep& a, const SimulatedStep& b) { return a.start < b.start; });
    return out;
  }

 private:
  struct StreamState {
    std::vector<int> steps;
    size_t next = 0;
    bool running = false;
  };
  struct Rank {
    std::vector<StreamState> streams;
    std::vector<uint64_t> signals;
    std::unique_ptr<GemmRun> gemm;
    std::map<int, double> step_start;
    double end = 0;
    int peer_copies = 0;  // active peer transfers touching this GPU
  };

  uint64_t signal(const SignalRef& s) const { return ranks_[static_cast<size_t>(s.rank)].signals[static_cast<size_t>(s.id)]; }
  void raise(const Notify& n) { ranks_[static_cast<size_t>(n.signal.rank)].signals[static_cast<size_t>(n.signal.id)] += n.increment; }
  bool met(const std::vector<Wait>& waits) const {
    return std::all_of(waits.begin(), waits.end(), [&](const Wait& w) { return signal(w.signal) >= w.value; });
  }
  const BufferDecl& decl(const Region& r) const { return plan_.ranks[static_cast<size_t>(r.rank)].buffers[static_cast<size_t>(r.buffer)]; }
  // Bytes of a region: its elements at their dtype's size, and for FP8 the fp32 scales that travel with
  // them (an FP8 AllGather moves half a bf16 one's bytes, plus its scales).
  double bytes(const Region& r) const { return bytes(r, r.box.rows, r.box.cols); }
  double bytes(const Region& r, int64_t rows, int64_t cols) const {
    const BufferDecl& d = decl(r);
    double total = static_cast<double>(rows * cols) * dtype_bytes(d.dtype);
    if (const auto grid = scale_grid(plan_.problem, d)) total += 4.0 * static_cast<double>(scales_touched(*grid, r.box.row, r.box.col, rows, cols));
    return total;
  }
  bool sms_free(int rank) const {
    const auto& g = ranks_[static_cast<size_t>(rank)].gemm;
    return !g || !g->holds_every_sm;
  }

  // Starts whatever can start now; true if anything did.
  bool try_start() {
    bool started = false;
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
      Rank& rk = ranks_[static_cast<size_t>(r)];
      for (StreamState& st : rk.streams) {
        if (st.running || st.next >= st.steps.size()) continue;
        const int index = st.steps[st.next];
        const Step& step = plan_.ranks[static_cast<size_t>(r)].steps[static_cast<size_t>(index)];
        if (!met(step.waits)) continue;
        if (start_step(r, index, step)) {
          st.running = true;
          rk.step_start[index] = now_;
          started = true;
        }
      }
      if (rk.gemm) started = start_entries(r) || started;
    }
    return started;
  }

  bool start_step(int r, int index, const Step& step) {
    return std::visit(
        [&](const auto& body) -> bool {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, GemmStep>) return start_gemm(r, index, body);
          else if constexpr (std::is_same_v<T, AttentionStep>) return start_attention(r, index, body);
          else if constexpr (std::is_same_v<T, CopyStep>) return start_copy(r, index, step, body);
          else if constexpr (std::is_same_v<T, CollectiveStep>) return arrive_at_collective(r, index, body);
          else if constexpr (std::is_same_v<T, JoinStep>) {
            schedule(0, r, index, now_);
            return true;
          } else {
            if (!sms_free(r)) return false;
            // A step that continues a companion launch pays no launch of its own.
            const bool continues = step.companion >= 0 && index > 0 &&
                                   plan_.ranks[static_cast<size_t>(r)].steps[static_cast<size_t>(index - 1)].companion == step.companion;
            double seconds = 0;
            if constexpr (std::is_same_v<T, ReduceStep>) seconds = reduce_seconds(r, body);
            else seconds = memory_seconds(body);
            schedule(0, r, index, now_ + (continues ? 0.0 : m_.launch_seconds) + seconds);
            return true;
          }
        },
        step.body);
  }

  // A reduction reads its local sources from memory and its peers' through NVLink, by SMs (at most
  // `sms` of them): whichever takes longer. On a few SMs (a companion's) every byte, local or not,
  // also passes through them at sm_reduce_bytes_per_s_per_sm each.
  double reduce_seconds(int r, const ReduceStep& s) const {
    double local = bytes(s.dst) * (1 + (s.accumulate ? 1 : 0)), remote = 0;
    for (const Region& src : s.srcs) (src.rank == r ? local : remote) += bytes(src);
    const double link = std::min(m_.nvlink_bytes_per_s, m_.sm_copy_bytes_per_s_per_sm * (s.sms > 0 ? s.sms : m_.sm_count));
    const double seconds = std::max(local / (0.8 * m_.memory_bytes_per_s), remote / link);
    return s.sms > 0 ? std::max(seconds, (local + remote) / (m_.sm_reduce_bytes_per_s_per_sm * s.sms)) : seconds;
  }
  double memory_seconds(const PermuteRowsStep& s) const { return 2 * bytes(s.dst) / (0.8 * m_.memory_bytes_per_s); }
  double memory_seconds(const CombineRowsStep& s) const { return bytes(s.dst) * (s.topk + 1) / (0.8 * m_.memory_bytes_per_s); }
  // The route's three kernels (counts, offsets, places): the choices read twice and its tables
  // written, plus the two launches beyond the step's own.
  double memory_seconds(const RouteStep& s) const {
    double written = bytes(s.scratch_source) + bytes(s.expert_first);
    if (s.layout_scratch) written += bytes(*s.layout_scratch);
    if (s.pair_scratch) written += bytes(*s.pair_scratch);
    return (2 * bytes(s.choices) + written) / (0.8 * m_.memory_bytes_per_s) + 2 * m_.launch_seconds;
  }
  double memory_seconds(const MoveBoxesStep& s) const {
    double moved = 0;
    for (const BoxMove& b : s.moves) moved += bytes(s.src, b.from.rows, b.from.cols);
    return 2 * moved / (0.8 * m_.memory_bytes_per_s);
  }
  template <class T>
  double memory_seconds(const T&) const {
    return 0;
  }

  void schedule(int kind, int r, int step, double time, int cta = 0) { events_.push({time, kind, r, step, cta}); }

  bool start_gemm(int r, int index, const GemmStep& g) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    if (rk.gemm) return false;  // one GEMM at a time per GPU
    if (g.tiles.empty() && !g.routed) {
      schedule(0, r, index, now_);
      return true;
    }
    auto run = std::make_unique<GemmRun>();
    run->rank = r;
    run->step = index;
    const bool library = is_plain_tile_table(g);
    const int64_t m = g.a.box.rows, n = g.b.box.rows, k = g.a.box.cols;
    const int sms = g.sm_limit > 0 ? std::min(g.sm_limit, m_.sm_count) : m_.sm_count;
    // A library GEMM picks its own tiling over the whole output: costed as the tiling rule's pick.
    const GemmTiling library_tiling = choose_overlap_gemm_tiling(m, n, k, sms, m_.tile_rates);
    const bool fp8 = is_fp8(decl(g.a).dtype);
    const TileShape tile = library ? library_tiling.tile : TileShape{g.tile_m, g.tile_n, fp8 ? kFp8OverlapGemmTile.tile_k : 64};
    // A routed grouped GEMM (tiles made per call): its rows without the grid's worst-case padding, in
    // tiles of its experts, about half a partial tile row per expert where the routing spreads them.
    const int64_t routed_n = g.routed ? n / std::max(g.routed->experts, 1) : 0;
    const int64_t routed_rows = g.routed ? std::max<int64_t>(m - int64_t{g.routed->experts} * (g.tile_m - 1), 1) : 0;
    const int64_t routed_row_tiles = g.routed ? (routed_rows + g.tile_m - 1) / g.tile_m + g.routed->experts / 2 : 0;
    const int64_t tiles = library     ? ((m + tile.tile_m - 1) / tile.tile_m) * ((n + tile.tile_n - 1) / tile.tile_n)
                          : g.routed ? routed_row_tiles * ((routed_n + tile.tile_n - 1) / tile.tile_n)
                                     : static_cast<int64_t>(g.tiles.size());
    const int splits = library ? library_tiling.k_splits : std::max(g.k_splits, 1);
    const double k_tiles = std::ceil(static_cast<double>(k) / tile.tile_k);
    const double share = splits > 1 ? (k_tiles / splits + kSplitFixupKTiles) / k_tiles : 1.0;
    // FP8 multiplies at fp8_speedup times the bf16 rate (MachineProfile::fp8_speedup); the overlap
    // GEMM's FP8 main loop at fp8_overlap_gemm_rate of the library's.
    const double peak = m_.peak_flops * (fp8 ? m_.fp8_speedup * (library ? 1.0 : m_.fp8_overlap_gemm_rate) : 1.0);
    const double per_cta_rate = peak * m_.gemm_efficiency * tile_rate(tile, m_.tile_rates) / m_.sm_count;
    double seconds = 2.0 * tile.tile_m * tile.tile_n * static_cast<double>(k) * share / per_cta_rate;
    const double out_bytes = g.routed ? dtype_bytes(decl(g.routed->out).dtype) : g.tiles.empty() ? 2.0 : dtype_bytes(decl(g.tiles.front().store).dtype);
    const int64_t entries = tiles * splits;
    run->grid = static_cast<int>(std::min<int64_t>(entries, sms));
    // No faster than streaming A, B and C through HBM with every CTA busy: C as the tiles store it
    // (a sparse table, as the grouped MoE GEMM's, stores a fraction of the m x n space).
    // A as the tiles read it: a table over part of A's box (a per-source grouped MoE GEMM over one
    // source's region) reads the tile rows it covers, not the whole box.
    double stored = static_cast<double>(m * n);
    int64_t a_rows = m;
    if (g.routed) {
      stored = static_cast<double>(routed_rows * routed_n);
      a_rows = std::min<int64_t>(m, routed_row_tiles * g.tile_m);
    } else if (!library) {
      stored = 0;
      std::vector<int64_t> tile_rows;
      for (const GemmTile& t : g.tiles) {
        stored += static_cast<double>(t.tile.rows * t.tile.cols);
        tile_rows.push_back(t.tile.row);
      }
      std::sort(tile_rows.begin(), tile_rows.end());
      const auto distinct = std::unique(tile_rows.begin(), tile_rows.end()) - tile_rows.begin();
      a_rows = std::min<int64_t>(m, static_cast<int64_t>(distinct) * g.tile_m);
    }
    const double streamed = bytes(g.a, a_rows, k) + bytes(g.b, n, k) + out_bytes * stored;
    seconds = std::max(seconds, streamed / m_.memory_bytes_per_s * run->grid / static_cast<double>(entries));
    if (library) {
      GemmRun::Entry e;
      e.seconds = seconds;
      if (entries < sms) {
        // Too few tiles for the SMs: the library splits K (or streams K) across them, so the GEMM
        // runs near the machine's rate rather than a tile per CTA: its FLOPs at the GEMM rate or its
        // bytes from HBM, whichever takes longer, in one round of the CTAs.
        const double share = static_cast<double>(sms) / m_.sm_count;  // of the machine's rate, on the SMs it may use
        const double whole = std::max(2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (peak * m_.gemm_efficiency * share),
                                      streamed / (m_.memory_bytes_per_s * share));
        e.seconds = std::min(seconds, whole);
        run->entries.assign(static_cast<size_t>(run->grid), e);
      } else {
        run->entries.assign(static_cast<size_t>(entries), e);
      }
    } else {
      // A tile stored into a peer's memory waits for its bytes to cross NVLink, which every CTA
      // storing to peers shares.
      const double peer_store = out_bytes * tile.tile_m * tile.tile_n * run->grid / std::max(m_.nvlink_bytes_per_s, 1.0);
      // Addends are read from HBM in the epilogue, every CTA reading at once. Their wait is costed
      // before the tile's loads, not in its epilogue where the kernel makes it: later by up to a
      // tile's time where the addends arrive while the tile computes.
      const double addend_read = out_bytes * tile.tile_m * tile.tile_n * run->grid / std::max(m_.memory_bytes_per_s, 1.0);
      if (g.routed) {
        GemmRun::Entry e;
        e.seconds = seconds / m_.overlap_gemm_efficiency;
        run->entries.assign(static_cast<size_t>(entries), e);
      }
      for (const GemmTile& t : g.tiles)
        for (int s = 0; s < splits; ++s) {
          GemmRun::Entry e;
          const bool last = s + 1 == splits;
          e.seconds = seconds / m_.overlap_gemm_efficiency + (last && t.store.rank != r ? peer_store : 0.0) +
                      (last ? addend_read * static_cast<double>(t.addends.size()) : 0.0);
          e.wait = t.wait;
          if (s + 1 == splits) e.notify = t.notify;
          run->entries.push_back(e);
        }
    }
    run->holds_every_sm = g.persistent && g.sm_limit == 0;
    run->queue.resize(static_cast<size_t>(run->grid));
    for (size_t e = 0; e < run->entries.size(); ++e) run->queue[e % static_cast<size_t>(run->grid)].push_back(e);
    run->next.assign(static_cast<size_t>(run->grid), 0);
    run->running.assign(static_cast<size_t>(run->grid), false);
    rk.gemm = std::move(run);
    return true;
  }

  // FlashAttention's work: a unit per (query tile, head) on CTAs persistent over the SMs the step may
  // use, each walking the KV tiles in the step's order and waiting for each before it loads it. A query
  // tile skips the KV tiles its causal mask hides wholly (their first key after its last query): no
  // FLOPs, no wait. A KV tile it reads costs 4 q_rows kv_rows head_dim FLOPs (Q K^T and P V) at the
  // machine's attention rate, and no less than its keys and values streamed from HBM by every CTA.
  bool start_attention(int r, int index, const AttentionStep& a) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    if (rk.gemm) return false;  // one compute kernel at a time per GPU
    const int64_t d = a.head_dim, rows = a.q.box.rows, heads = a.q.box.cols / std::max<int64_t>(d, 1);
    const int64_t query_tiles = (rows + a.tile_q - 1) / a.tile_q;
    if (a.kv_tiles.empty() || query_tiles * heads == 0) {
      schedule(0, r, index, now_);
      return true;
    }
    auto run = std::make_unique<GemmRun>();
    run->rank = r;
    run->step = index;
    const int sms = a.sm_limit > 0 ? std::min(a.sm_limit, m_.sm_count) : m_.sm_count;
    run->grid = static_cast<int>(std::min<int64_t>(query_tiles * heads, sms));
    run->queue.resize(static_cast<size_t>(run->grid));
    const double per_cta_rate = m_.peak_flops * m_.attention_efficiency / m_.sm_count;
    const double per_cta_bytes = m_.memory_bytes_per_s / run->grid;
    // Each unit's entries and work, then the units to CTAs heaviest first, each to the CTA with the
    // least work so far: causal query tiles differ in work, and FlashAttention-3's scheduler hands the
    // heaviest out first so that no CTA is left with the longest ones at the end.
    struct Unit {
      double seconds = 0;
      size_t first = 0, count = 0;  // its entries
    };
    std::vector<Unit> units;
    for (int64_t unit = 0; unit < query_tiles * heads; ++unit) {
      const int64_t first = (unit / heads) * a.tile_q, q_rows = std::min<int64_t>(a.tile_q, rows - first);
      Unit u;
      u.first = run->entries.size();
      for (const KvTile& t : a.kv_tiles) {
        if (a.causal && a.kv_position + t.row > a.q_position + first + q_rows - 1) continue;
        const double flops = 4.0 * static_cast<double>(q_rows * t.rows * d);
        const double seconds = std::max(flops / per_cta_rate, 2.0 * 2.0 * static_cast<double>(t.rows * d) / per_cta_bytes);
        u.seconds += seconds;
        // A KV tile whose wait is met once the unit's previous one has started (none, or the same
        // counter at no higher value) runs on from it: one entry, so that a long sequence's
        // thousands of KV tiles per query tile cost entries per wait, not per tile.
        GemmRun::Entry* previous = run->entries.size() > u.first ? &run->entries.back() : nullptr;
        if (previous && (!t.wait || (previous->wait && previous->wait->signal == t.wait->signal && t.wait->value <= previous->wait->value))) {
          previous->seconds += seconds;
          continue;
        }
        GemmRun::Entry e;
        e.seconds = seconds;
        e.wait = t.wait;
        run->entries.push_back(e);
      }
      u.count = run->entries.size() - u.first;
      units.push_back(u);
    }
    std::stable_sort(units.begin(), units.end(), [](const Unit& x, const Unit& y) { return x.seconds > y.seconds; });
    std::vector<double> load(static_cast<size_t>(run->grid), 0.0);
    for (const Unit& u : units) {
      const size_t cta = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[cta] += u.seconds;
      for (size_t e = u.first; e < u.first + u.count; ++e) run->queue[cta].push_back(e);
    }
    if (run->entries.empty()) {
      schedule(0, r, index, now_);
      return true;
    }
    run->holds_every_sm = a.sm_limit == 0;
    run->next.assign(static_cast<size_t>(run->grid), 0);
    run->running.assign(static_cast<size_t>(run->grid), false);
    rk.gemm = std::move(run);
    return true;
  }

  bool start_entries(int r) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    GemmRun& g = *rk.gemm;
    bool started = false;
    const double slowdown = rk.peer_copies > 0 ? m_.gemm_slowdown_beside_copies : 1.0;
    for (int c = 0; c < g.grid; ++c) {
      const auto& queue = g.queue[static_cast<size_t>(c)];
      if (g.running[static_cast<size_t>(c)] || g.next[static_cast<size_t>(c)] >= queue.size()) continue;
      const GemmRun::Entry& e = g.entries[queue[g.next[static_cast<size_t>(c)]]];
      if (e.wait && signal(e.wait->signal) < e.wait->value) continue;
      g.running[static_cast<size_t>(c)] = true;
      schedule(1, r, g.step, now_ + e.seconds * slowdown, c);
      started = true;
    }
    return started;
  }

  void complete_entry(int r, int cta) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    GemmRun& g = *rk.gemm;
    const GemmRun::Entry& e = g.entries[g.queue[static_cast<size_t>(cta)][g.next[static_cast<size_t>(cta)]]];
    if (e.notify) raise(*e.notify);
    g.running[static_cast<size_t>(cta)] = false;
    ++g.next[static_cast<size_t>(cta)];
    if (++g.done == g.entries.size()) {
      const int step = g.step;
      rk.gemm.reset();
      complete_step(r, step, m_.gemm_fixed_seconds);
    }
  }

  bool start_copy(int r, int index, const Step& step, const CopyStep& c) {
    const bool peer = c.src.rank != c.dst.rank || c.src.rank != r;
    const bool by_sms = step.engine == Engine::sm && peer;
    if (by_sms && !sms_free(r)) return false;
    Transfer t;
    t.rank = r;
    t.step = index;
    t.from = c.src.rank;
    t.to = c.dst.rank;
    t.peer = peer;
    t.remaining = bytes(c.src);
    t.cap = by_sms ? m_.sm_copy_bytes_per_s_per_sm * (c.sms > 0 ? c.sms : m_.sm_count)
                   : peer ? m_.link_bytes_per_s : m_.memory_bytes_per_s / 2;
    if (t.remaining <= 0) {
      schedule(0, r, index, now_);
      return true;
    }
    if (peer) {
      ++ranks_[static_cast<size_t>(t.from)].peer_copies;
      if (t.to != t.from) ++ranks_[static_cast<size_t>(t.to)].peer_copies;
    }
    transfers_.push_back(t);
    share_bandwidth();
    return true;
  }

  // Fair shares: a peer transfer gets its cap, or its part of each end's NVLink bandwidth.
  void share_bandwidth() {
    std::map<int, int> out, in;
    for (const Transfer& t : transfers_)
      if (t.peer) {
        ++out[t.from];
        ++in[t.to];
      }
    for (Transfer& t : transfers_) {
      t.rate = t.cap;
      if (t.peer) t.rate = std::min({t.cap, m_.nvlink_bytes_per_s / out[t.from], m_.nvlink_bytes_per_s / in[t.to]});
    }
  }

  void advance_transfers(double until) {
    for (Transfer& t : transfers_) t.remaining -= t.rate * (until - now_);
  }

  void finish_transfers() {
    bool any = false;
    for (size_t i = 0; i < transfers_.size();) {
      Transfer& t = transfers_[i];
      if (t.remaining > 1e-3) {
        ++i;
        continue;
      }
      if (t.peer) {
        --ranks_[static_cast<size_t>(t.from)].peer_copies;
        if (t.to != t.from) --ranks_[static_cast<size_t>(t.to)].peer_copies;
      }
      schedule(0, t.rank, t.step, now_ + m_.copy_latency_seconds);
      transfers_.erase(transfers_.begin() + static_cast<std::ptrdiff_t>(i));
      any = true;
    }
    if (any) share_bandwidth();
  }

  bool arrive_at_collective(int r, int index, const CollectiveStep& c) {
    if (!sms_free(r)) return false;  // NCCL's kernels need SMs
    auto& arrived = collectives_[c.id];
    arrived.push_back({r, index});
    if (static_cast<int>(arrived.size()) < plan_.world_size()) return true;
    // Everyone is in: it runs for the curve's time, slowed where a GEMM runs beside it.
    const CollectiveStep& first = c;
    double moved = bytes(first.src);
    if (first.kind == CollectiveKind::all_to_all) {
      moved = 0;
      for (int64_t rows : first.send_rows) moved += bytes(first.src, rows, first.src.box.cols);
    }
    double seconds = m_.collective_seconds(first.kind, plan_.world_size(), moved);
    bool beside_gemm = false;
    for (const Rank& rk : ranks_) beside_gemm = beside_gemm || static_cast<bool>(rk.gemm);
    if (beside_gemm) seconds *= m_.overlapped_slowdown(first.kind, plan_.world_size());
    for (const auto& [rank, step] : arrived) schedule(0, rank, step, now_ + seconds + m_.launch_seconds);
    collectives_.erase(c.id);
    return true;
  }

  void complete_step(int r, int index, double extra = 0) {
    if (extra > 0) {
      schedule(0, r, index, now_ + extra);
      return;
    }
    Rank& rk = ranks_[static_cast<size_t>(r)];
    const Step& step = plan_.ranks[static_cast<size_t>(r)].steps[static_cast<size_t>(index)];
    for (const Notify& n : step.notifies) raise(n);
    StreamState& st = rk.streams[static_cast<size_t>(step.stream)];
    st.running = false;
    ++st.next;
    rk.end = std::max(rk.end, now_);
    intervals_.push_back({r, step.stream, index, rk.step_start[index], now_});
  }

  const Plan& plan_;
  const MachineProfile& m_;
  double now_ = 0;
  std::vector<Rank> ranks_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<Transfer> transfers_;
  std::map<int, std::vector<std::pair<int, int>>> collectives_;  // id -> (rank, step) arrived
  std::vector<SimulatedStep> intervals_;
};

}  // namespace

Simulation simulate(const Plan& plan, const MachineProfile& machine) { return Simulator(plan, machine).run(); }

std::string chrome_trace(const Plan& plan, const Simulation& s) {
  Json::Array events;
  for (const RankPlan& rp : plan.ranks) {
    Json::Object process;
    process["name"] = "process_name";
    process["ph"] = "M";
    process["pid"] = rp.rank;
    process["args"] = Json(Json::Object{{"name", Json("rank " + std::to_string(rp.rank))}});
    events.push_back(Json(std::move(process)));
  }
  for (const SimulatedStep& step : s.steps) {
    const Step& ps = plan.ranks[static_cast<size_t>(step.rank)].steps[static_cast<size_t>(step.step)];
    Json::Object e;
    e["name"] = ps.label;
    e["cat"] = std::string(to_string(ps.engine));
    e["ph"] = "X";
    e["pid"] = step.rank;
    e["tid"] = step.stream;
    e["ts"] = step.start * 1e6;
    e["dur"] = (step.end - step.start) * 1e6;
    events.push_back(Json(std::move(e)));
  }
  Json::Object doc;
  doc["traceEvents"] = Json(std::move(events));
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = Json(Json::Object{{"strategy", Json(plan.strategy)}, {"predicted_ms", Json(s.seconds * 1e3)}});
  return Json(std::move(doc)).dump(0);
}

}  // namespace weft
