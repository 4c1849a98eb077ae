// Happens-before over every step and GEMM tile of a plan, and the checks built on it: no data race,
// no read before the write it depends on, no write to an input, every output element produced
// exactly once and before its rank ends.
//
// Nodes are steps (a GEMM is begin -> tiles -> end; tiles of one GEMM are unordered among themselves,
// as on the GPU; an attention step is begin -> its KV tiles that wait -> end) and collectives (one node shared by all ranks). Edges come from stream order and from
// signals. A wait for `s >= v` is known to follow notify X only if the notifies of s that could have
// fired without X (those not ordered after X and not ordered after the wait) add up to less than v;
// since that test uses happens-before itself, edges are added until nothing changes.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "checks.hpp"

namespace weft::detail {

namespace {

enum class AccessKind { read, define, update };

// `node` orders the access (happens-before is over nodes); `actor` is who makes it. They differ
// for the plain tiles of a GEMM step (no wait, notify or addends of their own): one node orders
// them all, between the step's start and end, and each is an actor of its own, so two of them
// touching one cell are still concurrent (a race) without a node per tile in the closure.
struct Access {
  Region region;
  AccessKind kind;
  int node;
  int actor;
};

struct Node {
  std::string what;
  std::vector<Wait> waits;
  std::vector<Notify> notifies;
};

class Bitset {
 public:
  explicit Bitset(size_t bits = 0) : words_((bits + 63) / 64, 0) {}
  void set(size_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  bool test(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1U; }
  void merge(const Bitset& other) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= other.words_[w];
  }
  size_t count() const {
    size_t n = 0;
    for (uint64_t w : words_) n += static_cast<size_t>(__builtin_popcountll(w));
    return n;
  }
  size_t count_common(const Bitset& other) const {
    size_t n = 0;
    for (size_t w = 0; w < words_.size(); ++w) n += static_cast<size_t>(__builtin_popcountll(words_[w] & other.words_[w]));
    return n;
  }

 private:
  std::vector<uint64_t> words_;
};

class OrderingChecker {
 public:
  OrderingChecker(const Plan& plan, ValidationReport& report) : plan_(plan), report_(report) {}

  void run() {
    build_graph();
    if (!close_over_signals()) return;
    check_accesses();
  }

 private:
  const Plan& plan_;
  ValidationReport& report_;
  std::vector<Node> nodes_;
  std::vector<int> node_actor_;
  std::vector<std::vector<int>> preds_;
  std::set<std::pair<int, int>> edges_;
  std::vector<Access> accesses_;
  std::vector<std::string> actors_;  // an actor's name; the actor of a node's own accesses is the node's
  std::vector<int> rank_end_;
  std::vector<Bitset> before_;  // before_[v].test(u): u happens before v
  std::map<std::string, int> reported_;
  // Per signal, a node after every raise of it, before each wait that needs them all (see close_over_signals).
  std::map<std::pair<int, SignalId>, int> all_raises_node_;

  int add_node(std::string what) {
    nodes_.push_back({what, {}, {}});
    preds_.emplace_back();
    node_actor_.push_back(add_actor(std::move(what)));
    return static_cast<int>(nodes_.size()) - 1;
  }
  int add_actor(std::string what) {
    actors_.push_back(std::move(what));
    return static_cast<int>(actors_.size()) - 1;
  }
  // Whether the edge is new.
  bool add_edge(int from, int to) {
    if (from < 0 || from == to || !edges_.insert({from, to}).second) return false;
    preds_[static_cast<size_t>(to)].push_back(from);
    return true;
  }
  void access(int node, const Region& region, AccessKind kind, int actor = -1) {
    if (!region.box.empty()) accesses_.push_back({region, kind, node, actor >= 0 ? actor : node_actor_[static_cast<size_t>(node)]});
  }
  // Reads of rows `rows` of `src`, merged into runs so that a sorted list costs one access per run.
  void read_rows(int node, const Region& src, std::vector<int64_t> rows) {
    std::sort(rows.begin(), rows.end());
    for (size_t i = 0; i < rows.size();) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] <= rows[j - 1] + 1) ++j;
      Region run = src;
      run.box = {src.box.row + rows[i], src.box.col, rows[j - 1] - rows[i] + 1, src.box.cols};
      access(node, run, AccessKind::read);
      i = j;
    }
  }
  bool happens_before(int u, int v) const { return u != v && before_[static_cast<size_t>(v)].test(static_cast<size_t>(u)); }
  bool ordered(int u, int v) const { return u == v || happens_before(u, v) || happens_before(v, u); }
  // Two accesses may overlap in time: different actors whose nodes are unordered, or the same node.
  bool concurrent(const Access& a, const Access& b) const { return a.actor != b.actor && (a.node == b.node || !ordered(a.node, b.node)); }

  void error(const std::string& rule, const std::string& key, const std::string& message) {
    constexpr int kMaxPerRule = 12;  // one broken plan should not print thousands of lines
    if (reported_.count(key)) return;
    int& count = reported_["#" + rule];
    reported_[key] = 1;
    if (++count <= kMaxPerRule) report_.errors.push_back({rule, message});
  }

  void build_graph() {
    std::map<int, int> collective_node;
    for (const RankPlan& rp : plan_.ranks) {
      const int r = rp.rank;
      std::vector<int> last(static_cast<size_t>(rp.stream_count), -1);
      for (const Step& step : rp.steps) {
        const std::string what = "rank " + std::to_string(r) + " stream " + std::to_string(step.stream) + " step '" + step.label + "'";
        int entry = -1, exit = -1;
        if (const auto* gemm = std::get_if<GemmStep>(&step.body)) {
          entry = add_node(what + " (start)");
          nodes_[static_cast<size_t>(entry)].waits = step.waits;
          exit = add_node(what);
          nodes_[static_cast<size_t>(exit)].notifies = step.notifies;
          add_edge(entry, exit);
          int plain = -1;  // the node of the plain tiles (see Access)
          if (gemm->routed) {
            // Tiles made per call: every row of a may be read and every row of out written (the
            // route gives each expert's rows; that each is stored once is the route's property,
            // tested with it, not this check's).
            access(entry, gemm->a, AccessKind::read);
            access(entry, gemm->b, AccessKind::read);
            access(entry, gemm->routed->expert_first, AccessKind::read);
            access(exit, gemm->routed->out, AccessKind::define);
          }
          for (size_t i = 0; i < gemm->tiles.size(); ++i) {
            const GemmTile& t = gemm->tiles[i];
            int tile = -1, loads = -1, actor = -1;
            if (!t.wait && !t.notify && t.addends.empty()) {
              if (plain < 0) {
                plain = add_node(what + " (tiles without waits or notifies)");
                add_edge(entry, plain);
                add_edge(plain, exit);
              }
              tile = loads = plain;
              actor = add_actor(what + " tile " + std::to_string(i));
            } else {
              tile = add_node(what + " tile " + std::to_string(i));
              // A tile with addends loads A and B before its wait (which orders its epilogue only):
              // its loads are a node of their own, before the tile's wait.
              loads = t.addends.empty() ? tile : add_node(what + " tile " + std::to_string(i) + " loads");
              if (t.wait) nodes_[static_cast<size_t>(tile)].waits.push_back(*t.wait);
              if (t.notify) nodes_[static_cast<size_t>(tile)].notifies.push_back(*t.notify);
              add_edge(entry, loads);
              if (loads != tile) add_edge(loads, tile);
              add_edge(tile, exit);
              actor = node_actor_[static_cast<size_t>(tile)];
            }
            Region a = gemm->a;
            a.box = {gemm->a.box.row + t.tile.row, gemm->a.box.col, t.tile.rows, gemm->a.box.cols};
            if (t.a_rows) a = *t.a_rows;
            Region b = gemm->b;
            b.box = {gemm->b.box.row + t.tile.col, gemm->b.box.col, t.tile.cols, gemm->b.box.cols};
            access(loads, a, AccessKind::read, actor);
            access(loads, b, AccessKind::read, actor);
            for (const Region& addend : t.addends) access(tile, addend, AccessKind::read, actor);
            access(tile, t.store, gemm->accumulate ? AccessKind::update : AccessKind::define, actor);
          }
        } else if (const auto* attention = std::get_if<AttentionStep>(&step.body)) {
          // start -> KV tiles -> end: a KV tile with a wait is a node of its own that reads its keys
          // and values after that wait; the rest read at the start. The result is written at the end.
          entry = add_node(what + " (start)");
          nodes_[static_cast<size_t>(entry)].waits = step.waits;
          exit = add_node(what);
          nodes_[static_cast<size_t>(exit)].notifies = step.notifies;
          add_edge(entry, exit);
          access(entry, attention->q, AccessKind::read);
          for (size_t i = 0; i < attention->kv_tiles.size(); ++i) {
            const KvTile& t = attention->kv_tiles[i];
            int tile = entry;
            if (t.wait) {
              tile = add_node(what + " KV tile " + std::to_string(i));
              nodes_[static_cast<size_t>(tile)].waits.push_back(*t.wait);
              add_edge(entry, tile);
              add_edge(tile, exit);
            }
            Region k = attention->k, v = attention->v;
            k.box = {attention->k.box.row + t.row, attention->k.box.col, t.rows, attention->k.box.cols};
            v.box = {attention->v.box.row + t.row, attention->v.box.col, t.rows, attention->v.box.cols};
            access(tile, k, AccessKind::read);
            access(tile, v, AccessKind::read);
          }
          const AccessKind result = attention->merge ? AccessKind::update : AccessKind::define;
          access(exit, attention->o, result);
          access(exit, attention->lse, result);
        } else if (const auto* coll = std::get_if<CollectiveStep>(&step.body)) {
          auto [it, fresh] = collective_node.try_emplace(coll->id, -1);
          if (fresh) it->second = add_node(std::string(to_string(coll->kind)) + " #" + std::to_string(coll->id));
          entry = exit = it->second;
          auto& node = nodes_[static_cast<size_t>(entry)];
          node.waits.insert(node.waits.end(), step.waits.begin(), step.waits.end());
          node.notifies.insert(node.notifies.end(), step.notifies.begin(), step.notifies.end());
          const bool in_place = coll->src == coll->dst;
          if (!in_place) access(entry, coll->src, AccessKind::read);
          access(entry, coll->dst, in_place ? AccessKind::update : AccessKind::define);
        } else {
          entry = exit = add_node(what);
          nodes_[static_cast<size_t>(entry)].waits = step.waits;
          nodes_[static_cast<size_t>(entry)].notifies = step.notifies;
          std::visit(
              [&](const auto& body) {
                using T = std::decay_t<decltype(body)>;
                if constexpr (std::is_same_v<T, CopyStep>) {
                  access(entry, body.src, AccessKind::read);
                  access(entry, body.dst, AccessKind::define);
                } else if constexpr (std::is_same_v<T, ReduceStep>) {
                  for (const auto& src : body.srcs)
                    if (!(src == body.dst)) access(entry, src, AccessKind::read);
                  access(entry, body.dst, body.accumulate ? AccessKind::update : AccessKind::define);
                } else if constexpr (std::is_same_v<T, PermuteRowsStep>) {
                  if (body.index) {  // rows known per call: any row of src
                    access(entry, *body.index, AccessKind::read);
                    access(entry, body.src, AccessKind::read);
                  } else {
                    read_rows(entry, body.src, body.source_rows);
                  }
                  access(entry, body.dst, AccessKind::define);
                } else if constexpr (std::is_same_v<T, CombineRowsStep>) {
                  if (body.index) {
                    access(entry, *body.index, AccessKind::read);
                    access(entry, body.src, AccessKind::read);
                  } else {
                    read_rows(entry, body.src, body.source_rows);
                  }
                  access(entry, body.weights, AccessKind::read);
                  access(entry, body.dst, AccessKind::define);
                } else if constexpr (std::is_same_v<T, RouteStep>) {
                  access(entry, body.choices, AccessKind::read);
                  access(entry, body.scratch_source, AccessKind::define);
                  access(entry, body.expert_first, AccessKind::define);
                  if (body.layout_scratch) access(entry, *body.layout_scratch, AccessKind::define);
                  if (body.pair_scratch) access(entry, *body.pair_scratch, AccessKind::define);
                } else if constexpr (std::is_same_v<T, MoveBoxesStep>) {
                  for (const BoxMove& move : body.moves) {
                    Region from = body.src, to = body.dst;
                    from.box = {body.src.box.row + move.from.row, body.src.box.col + move.from.col, move.from.rows, move.from.cols};
                    to.box = {body.dst.box.row + move.to.row, body.dst.box.col + move.to.col, move.to.rows, move.to.cols};
                    access(entry, from, AccessKind::read);
                    access(entry, to, AccessKind::define);
                  }
                }
              },
              step.body);
        }
        add_edge(last[static_cast<size_t>(step.stream)], entry);
        last[static_cast<size_t>(step.stream)] = exit;
      }
      const int end = add_node("end of rank " + std::to_string(r));
      for (int l : last) add_edge(l, end);
      rank_end_.push_back(end);
    }
  }

  bool compute_order() {
    const size_t n = nodes_.size();
    std::vector<int> indegree(n, 0);
    std::vector<std::vector<int>> succs(n);
    for (size_t v = 0; v < n; ++v)
      for (int u : preds_[v]) {
        succs[static_cast<size_t>(u)].push_back(static_cast<int>(v));
        ++indegree[v];
      }
    std::vector<int> ready, topo;
    for (size_t v = 0; v < n; ++v)
      if (indegree[v] == 0) ready.push_back(static_cast<int>(v));
    while (!ready.empty()) {
      const int v = ready.back();
      ready.pop_back();
      topo.push_back(v);
      for (int s : succs[static_cast<size_t>(v)])
        if (--indegree[static_cast<size_t>(s)] == 0) ready.push_back(s);
    }
    if (topo.size() != n) {
      for (size_t v = 0; v < n; ++v)
        if (indegree[v] > 0) {
          error("liveness", "cycle", "deadlock: " + nodes_[v].what + " is on a cycle of waits");
          return false;
        }
    }
    before_.assign(n, Bitset(n));
    for (int v : topo)
      for (int u : preds_[static_cast<size_t>(v)]) {
        before_[static_cast<size_t>(v)].merge(before_[static_cast<size_t>(u)]);
        before_[static_cast<size_t>(v)].set(static_cast<size_t>(u));
      }
    return true;
  }

  bool close_over_signals() {
    struct Raise {
      int node;
      uint64_t increment;
    };
    std::map<std::pair<int, SignalId>, std::vector<Raise>> raises;
    for (size_t v = 0; v < nodes_.size(); ++v)
      for (const auto& n : nodes_[v].notifies) raises[{n.signal.rank, n.signal.id}].push_back({static_cast<int>(v), n.increment});
    for (;;) {
      if (!compute_order()) return false;
      bool changed = false;
      // Per signal whose raises all add the same increment, each raise's successors among them as a
      // bitset over the raises: a wait then counts the raises that could fire without X with
      // popcounts instead of a pass over every raise per X (a counter that hundreds of tiles raise
      // and hundreds of tiles wait on, as fused gemm_rs's own tiles do, is otherwise cubic).
      std::map<std::pair<int, SignalId>, std::vector<Bitset>> successors;
      for (const auto& [key, candidates] : raises) {
        const uint64_t increment = candidates.front().increment;  // a local: lambdas may not capture structured bindings (clang)
        const bool uniform = std::all_of(candidates.begin(), candidates.end(), [increment](const Raise& r) { return r.increment == increment; });
        if (!uniform || candidates.size() < 64) continue;
        std::vector<Bitset>& after = successors[key];
        after.assign(candidates.size(), Bitset(candidates.size()));
        for (size_t i = 0; i < candidates.size(); ++i)
          for (size_t j = 0; j < candidates.size(); ++j)
            if (j != i && (happens_before(candidates[i].node, candidates[j].node) || candidates[j].node == candidates[i].node)) after[i].set(j);
      }
      // Waits that need every raise of their signal: ordered after one node that follows them all
      // instead of after each raise (fused gemm_rs at world 8: ~250 own tiles per rank wait for
      // ~1,800 raises each; direct edges made millions, and the closure over them the bulk of the check).
      std::map<std::pair<int, SignalId>, std::vector<int>> needs_all;
      for (size_t w = 0; w < nodes_.size(); ++w)
        for (const Wait& wait : nodes_[w].waits) {
          const auto key = std::make_pair(wait.signal.rank, wait.signal.id);
          const auto& candidates = raises[key];
          const auto fast = successors.find(key);
          Bitset possible(candidates.size());  // raises not ordered after the wait, and not the waiting node
          if (fast != successors.end())
            for (size_t j = 0; j < candidates.size(); ++j)
              if (!happens_before(static_cast<int>(w), candidates[j].node) && candidates[j].node != static_cast<int>(w)) possible.set(j);
          const size_t possible_count = possible.count();
          std::vector<int> needed;  // raises the wait needs and is not yet ordered after
          for (size_t i = 0; i < candidates.size(); ++i) {
            const Raise& x = candidates[i];
            if (x.node == static_cast<int>(w) || happens_before(x.node, static_cast<int>(w))) continue;
            uint64_t without_x = 0;
            if (fast != successors.end()) {
              // The others that are possible and neither after X nor X's own node (after[i] holds both,
              // never i itself).
              const size_t others = possible_count - (possible.test(i) ? 1 : 0) - possible.count_common(fast->second[i]);
              without_x = static_cast<uint64_t>(others) * x.increment;
            } else {
              for (const Raise& other : candidates) {
                if (other.node == x.node) continue;
                if (happens_before(x.node, other.node) || happens_before(static_cast<int>(w), other.node) ||
                    other.node == static_cast<int>(w))
                  continue;
                without_x += other.increment;
              }
            }
            if (without_x < wait.value) needed.push_back(x.node);
          }
          if (needed.size() == candidates.size() && needed.size() > 1) {
            needs_all[key].push_back(static_cast<int>(w));
            continue;
          }
          for (int x : needed) changed = add_edge(x, static_cast<int>(w)) || changed;
        }
      for (const auto& [key, waits] : needs_all) {
        int& all = all_raises_node_.try_emplace(key, -1).first->second;
        if (all < 0) {
          all = add_node("every raise of rank " + std::to_string(key.first) + "'s signal " + std::to_string(key.second));
          for (const Raise& x : raises[key]) add_edge(x.node, all);
        }
        for (int w : waits) changed = add_edge(all, w) || changed;
      }
      if (!changed) return true;
    }
  }

  std::string cell_text(const Region& region, const Rect& cell) const {
    Region r = region;
    r.box = cell;
    return describe_region(plan_, r);
  }

  void check_accesses() {
    std::map<std::pair<int, BufferId>, std::vector<int>> by_buffer;
    for (size_t i = 0; i < accesses_.size(); ++i)
      by_buffer[{accesses_[i].region.rank, accesses_[i].region.buffer}].push_back(static_cast<int>(i));
    for (const RankPlan& rp : plan_.ranks) by_buffer[{rp.rank, rp.output.buffer}];  // outputs nobody writes
    for (const auto& [key, list] : by_buffer) check_buffer(key.first, key.second, list);
  }

  void check_buffer(int rank, BufferId buffer, const std::vector<int>& list) {
    const RankPlan& owner = plan_.ranks[static_cast<size_t>(rank)];
    const BufferDecl& decl = owner.buffers[static_cast<size_t>(buffer)];
    const bool is_output = owner.output.buffer == buffer && !owner.output.box.empty();
    // Cells: the grid cut by every access box edge, so each cell is touched wholly or not at all.
    std::vector<int64_t> rows{0, decl.rows}, cols{0, decl.cols};
    auto cut = [&](const Rect& b) {
      rows.insert(rows.end(), {b.row, b.row_end()});
      cols.insert(cols.end(), {b.col, b.col_end()});
    };
    for (int a : list) cut(accesses_[static_cast<size_t>(a)].region.box);
    if (is_output) cut(owner.output.box);
    for (auto* v : {&rows, &cols}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    const size_t cell_cols = cols.size() - 1;
    std::vector<std::vector<int>> cells((rows.size() - 1) * cell_cols);
    auto index_of = [](const std::vector<int64_t>& v, int64_t x) {
      return static_cast<size_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
    };
    for (int a : list) {
      const Rect& b = accesses_[static_cast<size_t>(a)].region.box;
      for (size_t i = index_of(rows, b.row); i < index_of(rows, b.row_end()); ++i)
        for (size_t j = index_of(cols, b.col); j < index_of(cols, b.col_end()); ++j) cells[i * cell_cols + j].push_back(a);
    }
    const Region whole{rank, buffer, {}};
    for (size_t i = 0; i + 1 < rows.size(); ++i)
      for (size_t j = 0; j < cell_cols; ++j) {
        const Rect cell{rows[i], cols[j], rows[i + 1] - rows[i], cols[j + 1] - cols[j]};
        if (cell.empty()) continue;
        const bool in_output = is_output && contains(owner.output.box, cell);
        check_cell(decl, whole, cell, cells[i * cell_cols + j], in_output);
      }
  }

  void check_cell(const BufferDecl& decl, const Region& whole, const Rect& cell, const std::vector<int>& here,
                  bool in_output) {
    std::vector<const Access*> writes, reads;
    int defines = 0;
    for (int a : here) {
      const Access& acc = accesses_[static_cast<size_t>(a)];
      if (acc.kind != AccessKind::read) writes.push_back(&acc);
      if (acc.kind != AccessKind::define) reads.push_back(&acc);
      defines += acc.kind == AccessKind::define;
    }
    const std::string where = cell_text(whole, cell);
    auto name = [&](const Access* a) { return actors_[static_cast<size_t>(a->actor)]; };
    auto pair_key = [](const char* rule, int a, int b) {
      return std::string(rule) + std::to_string(std::min(a, b)) + "/" + std::to_string(std::max(a, b));
    };
    if (decl.role == BufferRole::input && !writes.empty()) {
      error("ordering", "input" + std::to_string(writes[0]->actor), name(writes[0]) + " writes " + where + " of input buffer '" + decl.name + "'");
    }
    for (size_t x = 0; x < writes.size(); ++x)
      for (size_t y = x + 1; y < writes.size(); ++y)
        if (concurrent(*writes[x], *writes[y]))
          error("ordering", pair_key("ww", writes[x]->actor, writes[y]->actor),
                "race: " + name(writes[x]) + " and " + name(writes[y]) + " both write " + where +
                    " with nothing ordering them");
    for (const Access* r : reads) {
      bool produced = decl.role == BufferRole::input;
      for (const Access* w : writes) {
        if (w->actor == r->actor) continue;
        if (concurrent(*w, *r))
          error("ordering", pair_key("rw", r->actor, w->actor),
                "race: " + name(r) + " reads " + where + " while " + name(w) +
                    " may still write it (no signal orders them)");
        produced = produced || happens_before(w->node, r->node);
      }
      if (!produced)
        error("ordering", "unproduced" + std::to_string(r->actor),
              name(r) + " reads " + where + " but no write of it is guaranteed to come first: the signal that guards it is missing");
    }
    if (!in_output) return;
    if (defines != 1)
      error("coverage", "cover" + std::to_string(whole.rank) + "/" + where,
            "output " + where + " is produced " + std::to_string(defines) + " times (expected exactly once)");
    for (const Access* w : writes)
      if (!happens_before(w->node, rank_end_[static_cast<size_t>(whole.rank)]))
        error("coverage", "late" + std::to_string(w->actor),
              name(w) + " writes output " + where + " but rank " + std::to_string(whole.rank) +
                  " may end before it finishes (nothing waits for it)");
  }
};

}  // namespace

void check_ordering_and_coverage(const Plan& plan, ValidationReport& report) { OrderingChecker(plan, report).run(); }

}  // namespace weft::detail
