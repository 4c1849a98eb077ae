#include <stdexcept>

#include "moe_support.hpp"
#include "weft/model/ficco_heuristic.hpp"
#include "weft/model/tiling.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/gpu_lowering.hpp"
#include "weft/plan/moe_route.hpp"
#include "weft/plan/strategies.hpp"

namespace weft {

bool Strategy::supports(OpKind op) const {
  for (OpKind o : ops)
    if (o == op) return true;
  return false;
}

namespace {

Strategy ficco(const std::string& schedule_name, FiccoSchedule schedule, const std::string& description) {
  return {"ficco_" + schedule_name, "FiCCO", description, {OpKind::ag_gemm, OpKind::a2a_gemm},
          [schedule](const Problem& p, const PlanOptions& o) { return plan_ficco(p, o, schedule); }, false};
}

}  // namespace

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {
      {"sequential", "-", "library GEMM, then the NCCL collective: the baseline every figure is measured against",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm, OpKind::ag_moe, OpKind::moe_rs,
        OpKind::ag_attention},
       plan_sequential, false},
      {"decomposed", "AsyncTP",
       "per-shard GEMMs on one stream, per-shard copy-engine or NCCL transfers on another, ordered by signals",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm, OpKind::ag_moe, OpKind::moe_rs, OpKind::ag_attention},
       plan_decomposed,
       false},
      {"ficco", "FiCCO", "the FiCCO schedule its heuristic picks from the GEMM's shape and the machine (Figure 12(a))",
       {OpKind::ag_gemm, OpKind::a2a_gemm},
       [](const Problem& p, const PlanOptions& o) {
         const FiccoSchedule pick = pick_ficco_schedule(p, o.machine).schedule;
         Plan plan = plan_ficco(p, o, pick);
         plan.strategy = "ficco=" + std::string(to_string(pick));  // tables show what was picked
         return plan;
       },
       false},
      {"signal", "FlashOverlap",
       "one GEMM on fewer SMs counting stored tiles per wave group; each group, stored contiguously, goes to a plain NCCL "
       "call as soon as it is complete, then back in place",
       {OpKind::gemm_ar, OpKind::gemm_rs, OpKind::gemm_a2a}, plan_signal, /*overlap_gemm=*/true, /*gemm_beside_nccl=*/true},
      {"fused", "Flux",
       "one GEMM with the communication fused in: tiles wait for their pulled rows (AG), or are stored into their "
       "rank's slot on that rank (RS)",
       {OpKind::ag_gemm, OpKind::gemm_rs}, plan_fused, /*overlap_gemm=*/true},
      {"two_level", "Flux/TileLink",
       "across nodes: load/store within each node (or group of ranks that reach each other), NCCL rounds of pairwise "
       "exchanges between nodes, per-shard GEMMs as data arrives; without load/store, decomposed over NCCL",
       {OpKind::ag_gemm, OpKind::gemm_rs}, plan_two_level, false},
      {"auto", "-",
       "the strategy and knobs measured fastest at the nearest tuned shape, else predicted fastest by the simulator; "
       "sequential wherever nothing is faster",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar, OpKind::gemm_a2a, OpKind::a2a_gemm, OpKind::ag_moe, OpKind::moe_rs,
        OpKind::ag_attention},
       plan_auto, false},
      {"chunked", "AutoOverlap",
       "a chunk schedule (template swizzle, ring, 2d, pull or partition, or a user's JSON) lowered to one overlap GEMM "
       "whose tiles follow chunk arrival, chunks moved by the copy engine, SMs or NCCL",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}, plan_chunked, /*overlap_gemm=*/true, /*gemm_beside_nccl=*/false,
       /*gemm_beside_companion=*/false, /*gemm_beside_copies=*/true},
      {"tilelink", "TileLink",
       "tile-centric notify/wait: the GEMM on the SMs the companion kernel leaves; the companion pulls A tiles (AG) or "
       "reduces each communication tile of partials from every rank as it completes (RS)",
       {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::ag_moe, OpKind::moe_rs, OpKind::ag_attention}, plan_tilelink, /*overlap_gemm=*/true, /*gemm_beside_nccl=*/false,
       /*gemm_beside_companion=*/true},
      ficco("uniform_fused_1d", FiccoSchedule::uniform_fused_1d,
            "finer-than-shard pulls; per step one GEMM over sub-chunk j of every shard, scattered into place"),
      ficco("hetero_fused_1d", FiccoSchedule::hetero_fused_1d,
            "local shard first; then per step one GEMM over the peers' sub-chunks, scattered into place"),
      ficco("hetero_unfused_1d", FiccoSchedule::hetero_unfused_1d,
            "local shard first; then per step one GEMM per received sub-chunk, in place"),
      ficco("uniform_fused_2d", FiccoSchedule::uniform_fused_2d,
            "K-column slices from every peer per step; GEMMs over all rows accumulate into C (for M <= K)"),
  };
  return all;
}

const Strategy& find_strategy(std::string_view name) {
  std::string known;
  for (const auto& s : strategies()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw std::invalid_argument("unknown strategy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace weft

namespace weft {

PlanOptions resolve_options(const Strategy& strategy, const Problem& problem, const PlanOptions& base) {
  PlanOptions o = base;
  // Knobs measured for this strategy at a shape near enough (the tuning table), where there are.
  if (o.tuning) {
    double distance = 0;
    if (const TuningEntry* e = o.tuning->nearest(problem, &distance); e && distance <= o.auto_table_distance) {
      const TunedCandidate* best = nullptr;
      for (const TunedCandidate& c : e->candidates)
        if (c.strategy == strategy.name && !c.options.empty() && c.ms > 0 && (!best || c.ms < best->ms)) best = &c;
      if (best) o = apply_candidate(o, *best);
    }
  }
  // An attention plan has no GEMM: its score tile is the options' tile as given.
  if (!strategy.overlap_gemm || is_attention(problem.op)) return o;
  const MachineProfile& machine = o.machine;
  const int sms = strategy.gemm_beside_companion ? machine.sm_count - o.tilelink.comm_sms
                  : !strategy.gemm_beside_nccl    ? machine.sm_count
                  : o.gemm_sms > 0                ? o.gemm_sms
                                                  : machine.sm_count - machine.collective_sms;
  // The one GEMM of a rank: over every rank's rows for AllGather+GEMM, its own rows otherwise.
  const int64_t rows = problem.op == OpKind::ag_gemm ? problem.m * problem.world_size : problem.m;
  // Stream-K (whose pick brings its own tile) only where the lowering will cut the table so: the GEMM
  // keeps every SM, and no tile adds peers' partial sums in its epilogue (gemm_rs reduced there;
  // stream_k_tail leaves such tables whole, which would run the stream-K tile without stream-K).
  const bool may_stream = !strategy.gemm_beside_nccl && !strategy.gemm_beside_companion && !strategy.gemm_beside_copies &&
                          problem.op != OpKind::gemm_rs;
  const GemmTiling tiling = is_fp8(problem.input_dtype) ? choose_fp8_overlap_gemm_tiling(rows, problem.n, problem.k, sms, machine.tile_rates)
                                                        : choose_overlap_gemm_tiling(rows, problem.n, problem.k, sms, machine.tile_rates, may_stream);
  o.tile_m = tiling.tile.tile_m;
  o.tile_n = tiling.tile.tile_n;
  // A GEMM beside NCCL keeps its waves (wave groups are counted in tiles of one wave); one beside
  // the companion kernel is not on every SM, which the split K needs.
  o.k_splits = strategy.gemm_beside_nccl || strategy.gemm_beside_companion ? 1 : tiling.k_splits;
  o.tail_splits = strategy.gemm_beside_nccl || strategy.gemm_beside_companion ? 1 : tiling.tail_splits;
  // Stream-K: where the rule takes it, or the caller asks for it (it replaces a tail split).
  o.stream_k = !strategy.gemm_beside_nccl && !strategy.gemm_beside_companion && (base.stream_k || tiling.stream_k);
  if (o.stream_k) o.tail_splits = 1;
  return o;
}

namespace {

// PlanOptions::gpu_lowerable_only: the strategy declines what the CUDA executor cannot lower.
Plan lowerable(const std::string& strategy, Plan plan, const PlanOptions& base) {
  if (!base.gpu_lowerable_only) return plan;
  if (auto gap = gpu_lowering_gap(plan, {false}))
    throw std::invalid_argument("strategy '" + strategy + "' declines " + std::string(to_string(plan.problem.input_dtype)) +
                                " here on the GPU: " + *gap);
  return plan;
}

}  // namespace

Plan make_plan(const Strategy& strategy, const Problem& problem, const PlanOptions& base) {
  if (runs_as_gemm_alone(problem) && !base.keep_strategy_at_world_one) {
    if (!strategy.supports(problem.op))  // declines as its builder would
      throw std::invalid_argument("strategy '" + strategy.name + "' does not implement " + std::string(to_string(problem.op)));
    return lowerable(strategy.name, plan_gemm_alone(problem, base, strategy.name), base);
  }
  if (is_attention(problem.op) && problem.world_size == 1 && !base.keep_strategy_at_world_one) {
    if (!strategy.supports(problem.op))
      throw std::invalid_argument("strategy '" + strategy.name + "' does not implement " + std::string(to_string(problem.op)));
    return plan_attention_alone(problem, base, strategy.name);
  }
  require_takes_device_routing(strategy.name, problem);
  Plan plan = strategy.build(problem, resolve_options(strategy, problem, base));
  if (base.topology) require_reachable(plan, *base.topology);
  require_whole_scale_blocks(strategy.name, plan);
  return lowerable(strategy.name, std::move(plan), base);
}

void require_takes_device_routing(const std::string& strategy, const Problem& problem) {
  if (problem.routing_on_device && strategy != "sequential" && strategy != "auto")
    throw std::invalid_argument("strategy '" + strategy + "' declines the MoE choices given on the device (" + describe(problem) +
                                "): only sequential plans them so far (\"default\" and \"auto\" run sequential here)");
}

std::string device_routing_gap(const std::string& strategy, const Problem& problem, const PlanOptions& options) {
  try {
    require_takes_device_routing(strategy, problem);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (int64_t{problem.world_size} * problem.experts > kMaxRoutedBlocks)
    return "the route on the device takes at most " + std::to_string(kMaxRoutedBlocks) + " (rank, expert) blocks; " + describe(problem) +
           " has " + std::to_string(int64_t{problem.world_size} * problem.experts);
  if (detail::grouped_gemm_tile_n(problem, options) == 0)
    return "the MoE plan with the choices given on the device runs the grouped GEMM only (bf16, N a multiple of 96, 128, 192 or 256, K of 8, "
           "PlanOptions::moe_grouped_gemm on); " + describe(problem) + " is not one";
  return {};
}

// Block-scaled FP8 is multiplied in whole 128-column blocks of K: a plan that cuts K elsewhere
// (ficco's 2D K slices of k / W columns) cannot run, so the strategy declines it.
void require_whole_scale_blocks(const std::string& strategy, const Plan& plan) {
  if (std::string why = first_scale_block_misalignment(plan); !why.empty())
    throw std::invalid_argument("strategy '" + strategy + "' declines block-scaled FP8 here: " + why);
}

}  // namespace weft
