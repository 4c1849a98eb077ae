// Liveness by abstract execution, and the raised-versus-awaited balance of signals.
//
// Signals only grow and a blocked stream only waits for signals or collectives, so whether a plan
// can finish does not depend on which ready stream moves first: one greedy run decides it. Tiles of
// a GEMM are taken in table order, as a persistent kernel hands them out; KV tiles of an attention
// step in their order, as every query tile reads them.
#include <map>
#include <sstream>

#include "checks.hpp"

namespace weft::detail {

namespace {

struct Cursor {
  std::vector<size_t> steps;  // indices into RankPlan::steps, in stream order
  size_t next = 0;
  bool started = false;  // the head step's own waits are met
  size_t next_tile = 0;
};

}  // namespace

void check_liveness(const Plan& plan, ValidationReport& report) {
  const int world = plan.world_size();
  std::vector<std::vector<uint64_t>> value(static_cast<size_t>(world));
  std::vector<std::vector<Cursor>> cursors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const RankPlan& rp = plan.ranks[static_cast<size_t>(r)];
    value[static_cast<size_t>(r)].assign(rp.signals.size(), 0);
    cursors[static_cast<size_t>(r)].resize(static_cast<size_t>(rp.stream_count));
    for (size_t s = 0; s < rp.steps.size(); ++s)
      cursors[static_cast<size_t>(r)][static_cast<size_t>(rp.steps[s].stream)].steps.push_back(s);
  }
  auto met = [&](const Wait& w) { return value[static_cast<size_t>(w.signal.rank)][static_cast<size_t>(w.signal.id)] >= w.value; };
  auto raise = [&](const Notify& n) { value[static_cast<size_t>(n.signal.rank)][static_cast<size_t>(n.signal.id)] += n.increment; };
  auto head = [&](int r, Cursor& c) -> const Step* {
    return c.next < c.steps.size() ? &plan.ranks[static_cast<size_t>(r)].steps[c.steps[c.next]] : nullptr;
  };
  auto finish = [&](Cursor& c, const Step& step) {
    for (const auto& n : step.notifies) raise(n);
    ++c.next;
    c.started = false;
    c.next_tile = 0;
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < world; ++r)
      for (auto& c : cursors[static_cast<size_t>(r)]) {
        while (const Step* step = head(r, c)) {
          if (!c.started) {
            bool ready = true;
            for (const auto& w : step->waits) ready = ready && met(w);
            if (!ready) break;
            c.started = true;
            progress = true;
          }
          if (const auto* gemm = std::get_if<GemmStep>(&step->body)) {
            while (c.next_tile < gemm->tiles.size()) {
              const GemmTile& t = gemm->tiles[c.next_tile];
              if (t.wait && !met(*t.wait)) break;
              if (t.notify) raise(*t.notify);
              ++c.next_tile;
              progress = true;
            }
            if (c.next_tile < gemm->tiles.size()) break;
          } else if (const auto* attention = std::get_if<AttentionStep>(&step->body)) {
            // KV tiles in their order, each after its wait (they notify nothing).
            while (c.next_tile < attention->kv_tiles.size()) {
              const KvTile& t = attention->kv_tiles[c.next_tile];
              if (t.wait && !met(*t.wait)) break;
              ++c.next_tile;
              progress = true;
            }
            if (c.next_tile < attention->kv_tiles.size()) break;
          } else if (const auto* coll = std::get_if<CollectiveStep>(&step->body)) {
            // Completes once every rank has some stream whose started head is this collective.
            std::vector<std::pair<int, Cursor*>> joined;
            for (int q = 0; q < world; ++q)
              for (auto& qc : cursors[static_cast<size_t>(q)]) {
                const Step* qs = head(q, qc);
                if (!qs || !qc.started) continue;
                const auto* qcoll = std::get_if<CollectiveStep>(&qs->body);
                if (qcoll && qcoll->id == coll->id) joined.push_back({q, &qc});
              }
            if (static_cast<int>(joined.size()) < world) break;
            for (auto [q, qc] : joined) finish(*qc, *head(q, *qc));
            progress = true;
            continue;
          }
          finish(c, *step);
          progress = true;
        }
      }
  }

  for (int r = 0; r < world; ++r)
    for (auto& c : cursors[static_cast<size_t>(r)]) {
      const Step* step = head(r, c);
      if (!step) continue;
      std::ostringstream why;
      auto describe_wait = [&](const Wait& w) {
        why << " waits for " << describe_signal(plan, w.signal) << " >= " << w.value << " but it only ever reaches "
            << value[static_cast<size_t>(w.signal.rank)][static_cast<size_t>(w.signal.id)];
      };
      why << "deadlock: rank " << r << " stream " << step->stream << " step '" << step->label << "'";
      if (!c.started) {
        for (const auto& w : step->waits)
          if (!met(w)) {
            describe_wait(w);
            break;
          }
      } else if (const auto* gemm = std::get_if<GemmStep>(&step->body)) {
        why << " tile " << c.next_tile;
        describe_wait(*gemm->tiles[c.next_tile].wait);
      } else if (const auto* attention = std::get_if<AttentionStep>(&step->body)) {
        why << " KV tile " << c.next_tile;
        describe_wait(*attention->kv_tiles[c.next_tile].wait);
      } else if (const auto* coll = std::get_if<CollectiveStep>(&step->body)) {
        why << " waits in collective #" << coll->id << " for ranks that never join it at this point";
      }
      report.errors.push_back({"liveness", why.str()});
    }
}

void check_signal_balance(const Plan& plan, ValidationReport& report) {
  std::map<std::pair<int, SignalId>, uint64_t> raised, awaited;
  auto note_wait = [&](const Wait& w) {
    auto& v = awaited[{w.signal.rank, w.signal.id}];
    v = std::max(v, w.value);
  };
  auto note_notify = [&](const Notify& n) { raised[{n.signal.rank, n.signal.id}] += n.increment; };
  for (const auto& rp : plan.ranks)
    for (const auto& step : rp.steps) {
      for (const auto& w : step.waits) note_wait(w);
      for (const auto& n : step.notifies) note_notify(n);
      if (const auto* gemm = std::get_if<GemmStep>(&step.body))
        for (const auto& t : gemm->tiles) {
          if (t.wait) note_wait(*t.wait);
          if (t.notify) note_notify(*t.notify);
        }
      if (const auto* attention = std::get_if<AttentionStep>(&step.body))
        for (const KvTile& t : attention->kv_tiles)
          if (t.wait) note_wait(*t.wait);
    }
  for (int r = 0; r < plan.world_size(); ++r)
    for (SignalId id = 0; id < static_cast<SignalId>(plan.ranks[static_cast<size_t>(r)].signals.size()); ++id) {
      const uint64_t up = raised.count({r, id}) ? raised[{r, id}] : 0;
      const uint64_t wanted = awaited.count({r, id}) ? awaited[{r, id}] : 0;
      if (up == wanted) continue;
      std::string message = describe_signal(plan, SignalRef{r, id}) + " is raised " + std::to_string(up) + " time(s) but ";
      message += wanted == 0 ? "never awaited" : "its highest wait expects " + std::to_string(wanted);
      message += up > wanted ? " (the surplus would leak into the next call's epoch)" : " (the wait can never be met)";
      report.errors.push_back({"signals", message});
    }
}

}  // namespace weft::detail
