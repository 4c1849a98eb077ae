// The cases of the plan property tests: every (op, strategy) pair of some ops at world sizes 1..W,
// with gtest names that say which.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "weft/plan/strategies.hpp"

namespace weft::testing_support {

struct StrategyCase {
  OpKind op;
  std::string strategy;
  int world;
};

inline void PrintTo(const StrategyCase& c, std::ostream* out) { *out << to_string(c.op) << " " << c.strategy << " world " << c.world; }

inline std::string case_name(const testing::TestParamInfo<StrategyCase>& info) {
  return std::string(to_string(info.param.op)) + "_" + info.param.strategy + "_w" + std::to_string(info.param.world);
}

// Every strategy that supports each op, at every world size 1..max_world.
inline std::vector<StrategyCase> strategy_cases(const std::vector<OpKind>& ops, int max_world) {
  std::vector<StrategyCase> cases;
  for (OpKind op : ops)
    for (const auto& s : strategies())
      if (s.supports(op))
        for (int world = 1; world <= max_world; ++world) cases.push_back({op, s.name, world});
  return cases;
}

}  // namespace weft::testing_support
