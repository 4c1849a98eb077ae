// A world of one: nothing to communicate, so every op is its GEMM, from the caller's A straight into
// C. gemm_a2a and a2a_gemm route every row to rank 0 in order, so they are the same GEMM. make_plan
// gives this plan at world 1 whatever the strategy (PlanOptions::keep_strategy_at_world_one keeps the
// strategy's own plan, to study its machinery on one GPU).
#include "builder_support.hpp"

namespace weft {

using detail::RankPlanBuilder;

bool runs_as_gemm_alone(const Problem& p) { return p.world_size == 1 && !is_moe(p.op) && !is_attention(p.op); }

Plan plan_gemm_alone(const Problem& p, const PlanOptions& options, const std::string& strategy) {
  check_problem(p);
  if (!runs_as_gemm_alone(p))
    throw std::invalid_argument("plan_gemm_alone: " + describe(p) + " communicates (world size " + std::to_string(p.world_size) +
                                "); only a world of one runs its GEMM alone");
  Plan plan;
  plan.strategy = strategy;
  plan.problem = p;
  RankPlanBuilder b(0, 1);
  const BufferId a = b.buffer("A", BufferRole::input, a_rows(p), p.k, p.input_dtype);
  const BufferId w = b.buffer("B", BufferRole::input, b_rows(p), p.k, operand_b_dtype(p));
  const BufferId c = b.buffer("C", BufferRole::output, output_rows(p, 0), p.n, p.output_dtype);
  b.add("gemm (world 1: nothing to communicate)", 0, Engine::sm, detail::gemm_into(b.whole(a), b.whole(w), b.whole(c), options));
  b.set_output(b.whole(c));
  plan.ranks.push_back(b.finish());
  return plan;
}

}  // namespace weft
