// Strategies: each is a plan builder, a pure function from (problem, options) to a Plan.
//
//   const Strategy& s = find_strategy("decomposed");
//   Plan plan = s.build(problem, PlanOptions{});
//
// strategies() lists every strategy weft knows, with a one-line description (the README's table and
// `weft --help` print it). Builders check the problem (check_problem) and throw std::invalid_argument
// for ops they do not implement.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/machine_profile.hpp"
#include "weft/core/plan.hpp"

namespace weft {

struct PlanOptions {
  int tile_m = 128;
  int tile_n = 128;
  Raster raster = Raster::along_m;
  // Strips of 8 tile columns: a wave of ~132 tiles then covers ~16 row blocks x 8 column blocks,
  // so a wave reads a few row blocks of A and of B from HBM; with strips of 1 a wave walks down
  // whole columns and re-reads all of A every wave.
  int swizzle = 8;
  // For strategies that pick by the machine (ficco's heuristic); --machine FILE in the tool.
  MachineProfile machine;
};

struct Strategy {
  std::string name;
  std::string paper;
  std::string description;
  std::vector<OpKind> ops;  // the ops it builds plans for
  std::function<Plan(const Problem&, const PlanOptions&)> build;

  bool supports(OpKind op) const;
};

const std::vector<Strategy>& strategies();
// Throws std::invalid_argument listing the known names when `name` is unknown.
const Strategy& find_strategy(std::string_view name);

// Library GEMM, then the NCCL collective: the baseline every figure is measured against.
Plan plan_sequential(const Problem& problem, const PlanOptions& options);
// AsyncTP-style: per-shard GEMMs on one stream, per-shard transfers on another, ordered by signals.
Plan plan_decomposed(const Problem& problem, const PlanOptions& options);

// FiCCO's four schedules (ficco.txt Figure 11(b)) for ag_gemm; plan_ficco.cpp says what each does.
enum class FiccoSchedule { uniform_fused_1d, hetero_fused_1d, hetero_unfused_1d, uniform_fused_2d };
std::string_view to_string(FiccoSchedule schedule);
Plan plan_ficco(const Problem& problem, const PlanOptions& options, FiccoSchedule schedule);

}  // namespace weft
