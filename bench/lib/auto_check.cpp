#include "auto_check.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "simulator_fit.hpp"
#include "weft/plan/auto.hpp"

namespace weft::bench {

namespace {

using ShapeKey = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int, int, int, int, bool, int, int>;
ShapeKey key_of(const Problem& p) {
  return {static_cast<int>(p.op), p.world_size, p.m, p.n, p.k, p.experts, p.topk, p.batch, p.heads, p.kv_heads, p.head_dim, p.causal,
          static_cast<int>(p.input_dtype), static_cast<int>(p.scaling)};
}

}  // namespace

TuningTable tuning_table_from(const std::vector<RecordedRow>& rows, const std::string& machine, const Problem* skip) {
  std::map<ShapeKey, TuningEntry> entries;
  for (const RecordedRow& r : rows) {
    if (skip && key_of(r.problem) == key_of(*skip)) continue;
    TuningEntry& e = entries[key_of(r.problem)];
    e.op = r.problem.op;
    e.world = r.problem.world_size;
    e.m = r.problem.m;
    e.n = r.problem.n;
    e.k = r.problem.k;
    if (is_moe(r.problem.op)) {
      e.experts = r.problem.experts;
      e.topk = r.problem.topk;
    }
    if (is_attention(r.problem.op)) {
      e.batch = r.problem.batch;
      e.heads = r.problem.heads;
      e.kv_heads = r.problem.kv_heads;
      e.head_dim = r.problem.head_dim;
      e.causal = r.problem.causal;
    }
    e.dtype = r.problem.input_dtype;
    e.scaling = r.problem.scaling;
    if (e.source.find(r.file) == std::string::npos) e.source += (e.source.empty() ? "weft bench, bench/results/" : ", ") + r.file;
    e.candidates.push_back({r.strategy, {}, r.t_ms});
  }
  TuningTable t;
  t.machine = machine;
  for (auto& [key, e] : entries) t.entries.push_back(std::move(e));
  return t;
}

AutoJudgement judge_auto(const std::vector<RecordedRow>& rows, const MachineProfile& machine, bool use_table, double noise) {
  const std::vector<SimulatedRow> simulated = plans_for(rows, machine);
  const std::vector<double> predicted = predicted_seconds(simulated, machine);  // once, not per shape left out
  std::map<ShapeKey, std::vector<const RecordedRow*>> shapes;
  for (const RecordedRow& r : rows) shapes[key_of(r.problem)].push_back(&r);
  AutoJudgement out;
  for (const auto& [key, recorded] : shapes) {
    const Problem& p = recorded.front()->problem;
    std::vector<std::string> candidates;
    std::map<std::string, double> measured;
    for (const RecordedRow* r : recorded) {
      // ficco_* schedules are strategies of their own; every recorded one is a candidate.
      if (!candidates.empty() && std::find(candidates.begin(), candidates.end(), r->strategy) != candidates.end()) continue;
      candidates.push_back(r->strategy);
      measured[r->strategy] = r->t_ms;
    }
    if (!measured.count("sequential")) continue;  // nothing to judge against
    PlanOptions o;
    o.tile_m = 128;
    o.tile_n = 256;
    o.machine = machine;
    // The simulator's accuracy as every other shape measured it: this shape does not judge itself.
    o.machine.prediction_accuracy = prediction_accuracy(simulated, predicted, &p);
    o.machine.fp8_prediction_accuracy = prediction_accuracy(simulated, predicted, &p, /*fp8=*/true);
    if (use_table) o.tuning = std::make_shared<const TuningTable>(tuning_table_from(rows, machine.device, &p));
    const AutoChoice c = choose_strategy(p, o, candidates);
    AutoJudged j;
    j.row = recorded.front()->row;
    j.problem = p;
    j.picked = c.candidate.strategy;
    j.reason = c.reason;
    j.from_table = c.reason.rfind("measured", 0) == 0;
    j.picked_ms = measured.at(j.picked);
    j.sequential_ms = measured.at("sequential");
    for (const auto& [name, ms] : measured)
      if (j.best.empty() || ms < j.best_ms) {
        j.best = name;
        j.best_ms = ms;
      }
    out.never_slower += j.picked_ms <= j.sequential_ms * (1 + noise);
    out.near_best += j.picked_ms <= 1.05 * j.best_ms;
    out.rows.push_back(std::move(j));
  }
  return out;
}

}  // namespace weft::bench
