#include "heuristic_judgement.hpp"

#include <map>

namespace weft {

HeuristicJudgement judge_heuristic(const std::vector<TimedStrategy>& timed, const std::string& family, double tolerance) {
  const std::string schedule_prefix = family + "_", pick_prefix = family + "=";
  struct RowTimes {
    std::map<std::string, TimedStrategy> schedules;  // by schedule name
    std::string picked;
  };
  std::vector<std::string> order;  // rows in the order they were measured
  std::map<std::string, RowTimes> rows;
  for (const TimedStrategy& s : timed) {
    if (!rows.count(s.row)) order.push_back(s.row);
    RowTimes& r = rows[s.row];
    if (s.strategy.rfind(pick_prefix, 0) == 0) r.picked = s.strategy.substr(pick_prefix.size());
    else if (s.strategy.rfind(schedule_prefix, 0) == 0) r.schedules[s.strategy.substr(schedule_prefix.size())] = s;
  }
  HeuristicJudgement judgement;
  double wrong_loss = 0;
  for (const std::string& name : order) {
    const RowTimes& r = rows[name];
    const auto picked = r.schedules.find(r.picked);
    if (r.picked.empty() || picked == r.schedules.end()) continue;
    const TimedStrategy* best = nullptr;
    for (const auto& [schedule, s] : r.schedules)
      if (!best || s.t < best->t) best = &s;
    JudgedRow j;
    j.row = name;
    j.best = best->strategy.substr(schedule_prefix.size());
    j.best_speedup = best->t_seq / best->t;
    j.picked = r.picked;
    j.picked_speedup = picked->second.t_seq / picked->second.t;
    j.loss = picked->second.t / best->t - 1.0;
    j.picked_best = j.loss <= tolerance;
    judgement.rows.push_back(j);
    ++judgement.judged;
    if (j.picked_best) {
      ++judgement.right;
    } else {
      wrong_loss += j.loss;
    }
  }
  const int wrong = judgement.judged - judgement.right;
  judgement.mean_loss_when_wrong = wrong > 0 ? wrong_loss / wrong : 0.0;
  return judgement;
}

}  // namespace weft
