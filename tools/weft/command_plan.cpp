#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "commands.hpp"
#include "plan_summary.hpp"
#include "progress.hpp"
#include "weft/plan/chunked.hpp"
#include "weft/reference/cpu_proof.hpp"

namespace weft::cli {

int command_plan(const Arguments& args) {
  const Problem problem = problem_from(args);
  PlanOptions options = plan_options_from(args);
  options.topology = topology_from(args, problem.world_size);
  require_plan_fits(problem, options);
  if (options.topology) std::cout << "topology: " << describe(*options.topology) << "\n";
  // A schedule file means the chunked strategy; its JSON is printed with the plan.
  const std::string strategy = args.text("strategy", options.chunked.schedule ? "chunked" : "sequential");
  require_knobs_apply(args, {strategy});
  require_takes_device_routing(strategy, problem);  // make_plan's decline, said before the builder's own
  const Plan plan = find_strategy(strategy).build(problem, options);
  if (options.topology) require_reachable(plan, *options.topology);  // a decline names the ranks
  // --summary: counts per rank instead of every step (a large plan prints millions of lines).
  const bool summary = args.flag("summary");
  if (strategy == "chunked" && !summary)
    std::cout << "schedule: " << schedule_json(options.chunked.schedule ? *options.chunked.schedule : make_schedule(problem, options.chunked)) << "\n";
  std::cout << (summary ? plan_summary(plan) : to_string(plan));
  const auto report = validate_plan(plan);
  std::cout << report.summary() << "\n";
  return report.ok() ? 0 : 1;
}

int command_check(const Arguments& args) {
  Problem dtypes;
  dtypes_from(args, dtypes);
  // FP8 has no attention form: the default ops are then the GEMM ops (an ag_attention named with --op
  // fails as the problem it is).
  const std::vector<OpKind> ops = ops_from(args, /*with_attention=*/!is_fp8(dtypes.input_dtype));
  const std::vector<std::string> names = strategies_from(args);
  const std::vector<int> worlds = args.integers("world", {1, 2, 3, 4, 8});
  const int nodes = static_cast<int>(args.integer("nodes", 0));
  const Numbers numbers{dtypes.input_dtype, dtypes.b_dtype, dtypes.output_dtype, dtypes.scaling, dtypes.b_layout, args.flag("routing-on-device")};
  return run_plan_checks(ops, names, worlds, static_cast<uint64_t>(args.integer("seed", 1)), nodes, args.flag("no-p2p"), "weft check", numbers) == 0
             ? 0
             : 1;
}

int run_plan_checks(const std::vector<OpKind>& ops, const std::vector<std::string>& strategy_names,
                    const std::vector<int>& world_sizes, uint64_t seed, int nodes, bool no_p2p, const std::string& command,
                    const Numbers& numbers) {
  // Small shapes keep the reference executor fast; the second is ragged against the 32x32 tiles.
  // ag_attention has shapes of its own (m: tokens per rank): causal GQA (8 query heads sharing 2
  // key/value heads of 16) and multi-head attention (2 heads of 8, 2 batch entries), both ragged
  // against the 32-row tiles.
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{64, 96, 48}, {56, 72, 40}};
  struct AttentionShape {
    int64_t m;
    int batch, heads, kv_heads, head_dim;
    bool causal;
  };
  const AttentionShape attention_shapes[] = {{40, 1, 8, 2, 16, true}, {21, 2, 2, 2, 8, false}};
  static_assert(std::size(attention_shapes) == std::size(shapes), "a shape of each kind per row of the table");
  PlanOptions options;
  options.tile_m = 32;
  options.tile_n = 32;
  int failed = 0, checked = 0;
  size_t total = 0;
  for (OpKind op : ops)
    for (const auto& name : strategy_names) total += find_strategy(name).supports(op) ? world_sizes.size() * std::size(shapes) : 0;
  Progress progress(command, "plans", total);
  std::printf("%-9s %-11s %5s %14s  %-6s %s\n", "op", "strategy", "world", "m,n,k", "result", "worst rel. error");
  if (std::find_first_of(ops.begin(), ops.end(), attention_ops().begin(), attention_ops().end()) != ops.end())
    std::printf("(ag_attention's shape is m,batch x heads/kv_heads x head_dim, c where causal)\n");
  for (OpKind op : ops)
    for (const auto& name : strategy_names) {
      const Strategy& strategy = find_strategy(name);
      if (!strategy.supports(op)) continue;
      for (int world : world_sizes)
        for (const Shape& s : shapes) {
          progress.step();
          if (nodes > 0 && world % nodes != 0) {
            std::printf("%-9s %-11s %5d %14s  %-6s --nodes %d does not divide the world size\n", std::string(to_string(op)).c_str(), name.c_str(),
                        world, "-", "FAILED", nodes);
            ++failed;
            break;
          }
          if (no_p2p) options.topology = Topology::no_load_store(world);
          else if (nodes > 0) options.topology = Topology::nodes_of(nodes, world / nodes);
          Problem p{op, s.m, s.n, s.k, world, numbers.input, numbers.output, {}};
          p.b_dtype = numbers.b;
          p.scaling = numbers.scaling;
          p.b_layout = numbers.b_layout;
          if (op == OpKind::gemm_rs && p.m % world != 0) p.m = (p.m / world + 1) * world;
          char shape[64];
          std::snprintf(shape, sizeof shape, "%lld,%lld,%lld", static_cast<long long>(p.m), static_cast<long long>(p.n),
                        static_cast<long long>(p.k));
          if (is_attention(op)) {
            const AttentionShape& a = attention_shapes[&s - shapes];
            p = Problem{op, a.m, 0, 0, world, numbers.input, numbers.output, {}};
            p.b_dtype = numbers.b;
            p.scaling = numbers.scaling;
            p.batch = a.batch;
            p.heads = a.heads;
            p.kv_heads = a.kv_heads;
            p.head_dim = a.head_dim;
            p.causal = a.causal;
            std::snprintf(shape, sizeof shape, "%lld,%dx%d/%dx%d%s", static_cast<long long>(p.m), p.batch, p.heads, p.kv_heads, p.head_dim,
                          p.causal ? ",c" : "");
          }
          p.routing_on_device = numbers.routing_on_device && is_moe(op);
          draw_routing(p, seed + static_cast<uint64_t>(world));
          try {
            check_problem(p);
          } catch (const std::invalid_argument& e) {
            // A problem weft cannot state is a failure of the check, not a shape a strategy declines.
            std::printf("%-9s %-11s %5d %14s  %-6s %s\n", std::string(to_string(op)).c_str(), name.c_str(), world, shape, "FAILED", e.what());
            ++failed;
            continue;
          }
          Plan plan;
          try {
            require_takes_device_routing(name, p);  // make_plan's decline
            plan = strategy.build(p, options);
            if (options.topology) require_reachable(plan, *options.topology);
            require_whole_scale_blocks(name, plan);  // make_plan's decline (ficco's 2D K slices of block-scaled FP8)
          } catch (const std::invalid_argument& e) {
            // The strategy cannot lay out this shape (signal's gemm_rs needs whole tile rows per rank):
            // not a failed plan, a shape it declines, said with its reason.
            std::printf("%-9s %-11s %5d %14s  %-6s %s\n", std::string(to_string(op)).c_str(), name.c_str(), world, shape, "declined", e.what());
            continue;
          }
          const CpuProof proof = prove_on_cpu(plan, seed);
          ++checked;
          std::printf("%-9s %-11s %5d %14s  %-6s %.2e\n", std::string(to_string(op)).c_str(), name.c_str(), world, shape,
                      proof.passed() ? "ok" : "FAILED", proof.worst_relative_error);
          if (!proof.passed()) {
            ++failed;
            std::cout << proof.explain();
          }
        }
    }
  progress.finish();
  if (checked == 0 && failed == 0) {
    std::printf("plan checks: nothing was checked (every strategy declined or supports none of the ops)\n");
    return 1;
  }
  std::printf("plan checks: %d plan(s) checked, %d failed (validation, reference run on the CPU, comparison with the direct computation)\n",
              checked, failed);
  return failed;
}

}  // namespace weft::cli
