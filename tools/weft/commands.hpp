// The `weft` tool's commands; each returns the process exit code.
#pragma once

#include "arguments.hpp"

namespace weft::cli {

int command_plan(const Arguments& args);   // print a plan and its validation report
int command_check(const Arguments& args);  // prove plans on the CPU (validation + reference run)
int command_bench(const Arguments& args);       // time strategies on GPUs; plan checks where there are none
int command_bench_gemm(const Arguments& args);      // the overlap GEMM against cuBLASLt on one GPU
int command_bench_rmsnorm(const Arguments& args);   // RMSNorm plain vs fused with signal's remap, one GPU
int command_bench_tilelink(const Arguments& args);  // TileLink's microbenchmark: companion copy bandwidth, GEMM by comm SMs
int command_bench_attention(const Arguments& args); // the attention kernel in TFLOP/s, one GPU
int command_bench_kernels(const Arguments& args);   // the auxiliary kernels against the copy roofline, one GPU
int command_characterize(const Arguments& args);  // FiCCO's decomposition and contention losses
int command_tune(const Arguments& args);          // --calibrate: measure and save the machine profile
int command_simulate(const Arguments& args);      // predict strategies' times; check against recorded rows

// The operands' and result's dtypes and the FP8 scaling the plans are proved with (--dtype,
// --b-dtype, --output-dtype, --scaling; dtypes_from).
struct Numbers {
  DType input = DType::bf16;
  std::optional<DType> b = std::nullopt;
  DType output = DType::bf16;
  Scaling scaling = Scaling::none;
  BLayout b_layout = BLayout::nk;  // the GEMM ops' (ag_attention has no B)
  bool routing_on_device = false;  // the MoE ops' choices given on the device (Problem::routing_on_device)
};

// Proves every (op, strategy, world size) over a set of small shapes on the CPU and prints a table.
// Returns the number of plans that failed. nodes (0: one) / no_p2p: the ranks' topology, as
// topology_from reads it. `command` names the progress line on stderr.
int run_plan_checks(const std::vector<OpKind>& ops, const std::vector<std::string>& strategy_names,
                    const std::vector<int>& world_sizes, uint64_t seed, int nodes = 0, bool no_p2p = false,
                    const std::string& command = "weft check", const Numbers& numbers = {});

}  // namespace weft::cli
