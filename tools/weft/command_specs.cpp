#include "command_specs.hpp"

#include <sstream>
#include <stdexcept>

namespace weft::cli {

namespace {

using K = OptionKind;
using Options = std::vector<OptionSpec>;

constexpr int64_t kMaxSms = 1024;
constexpr int64_t kMaxIterations = 100000;

OptionSpec integer(std::string name, std::string value, std::string help, int64_t min, int64_t max) {
  return {std::move(name), K::integer, std::move(value), std::move(help), min, max};
}
OptionSpec integers(std::string name, std::string value, std::string help, int64_t min, int64_t max) {
  return {std::move(name), K::integers, std::move(value), std::move(help), min, max};
}
OptionSpec text(std::string name, std::string value, std::string help) { return {std::move(name), K::text, std::move(value), std::move(help)}; }
OptionSpec list(std::string name, std::string value, std::string help) { return {std::move(name), K::list, std::move(value), std::move(help)}; }
OptionSpec flag(std::string name, std::string help) { return {std::move(name), K::flag, "", std::move(help)}; }

Options operator+(Options a, const Options& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Options timing(int64_t iterations) {
  return {integer("warmup", "N", "untimed calls first (5)", 0, kMaxIterations),
          integer("iterations", "N", "timed calls; the median is reported (" + std::to_string(iterations) + ")", 1, kMaxIterations)};
}

Options dtype_knobs() {
  return {text("dtype", "T", "the operands': bf16 (default), f16, f32, or FP8 e4m3 / e5m2 with --scaling (GPUs run bf16, and FP8 "
                             "where plan/gpu_lowering.hpp admits it)"),
          text("input-dtype", "T", "the older name of --dtype"),
          text("b-dtype", "T", "B's dtype where it differs from A's: e4m3 or e5m2 (FP8 backward: e5m2 gradients x e4m3)"),
          text("scaling", "S", "FP8: tensor, row (A per row, B per column of the output) or block (A 1x128, B 128x128)"),
          text("output-dtype", "T", "bf16 (default) or f32; never FP8"),
          text("b-layout", "L", "B's memory: nk (row-major [N,K], a linear layer's weight; default) or kn (row-major [K,N], a torch w.t() view)")};
}

Options one_problem() {
  return Options{text("op", "OP", "ag_gemm, gemm_rs, gemm_ar, gemm_a2a, a2a_gemm, ag_moe, moe_rs or ag_attention (gemm_ar)"),
          integer("m", "M", "rows of A per rank (ag_gemm, gemm_a2a, a2a_gemm, MoE, ag_attention: tokens per rank) (256)", 1, kMaxDimension),
          integer("n", "N", "columns of C (128)", 1, kMaxDimension),
          integer("k", "K", "columns of A (64)", 1, kMaxDimension),
          integer("seed", "S", "seed of the routing of the routed and MoE ops (1)", 0, std::numeric_limits<int64_t>::max()),
          integer("experts", "E", "MoE ops: experts (8)", 1, 1024),
          integer("topk", "K", "MoE ops: experts per token (2)", 1, 64),
          flag("routing-on-device", "MoE ops: the choices come per call as each rank's input, routed by the plan on the device (sequential)"),
          integer("batch", "B", "ag_attention: sequences side by side (1)", 1, kMaxDimension),
          integer("heads", "H", "ag_attention: query heads (8)", 1, kMaxAttentionHeads),
          integer("kv-heads", "G", "ag_attention: key/value heads, dividing --heads (GQA; default: --heads)", 1, kMaxAttentionHeads),
          integer("head-dim", "D", "ag_attention: the head dimension (64)", 1, kMaxHeadDim),
          flag("causal", "ag_attention: a query attends only the keys at or before its global position")} +
         dtype_knobs();
}

Options tile_order_knobs() {
  return {text("raster", "R", "along_m or along_n: the tile order (along_m)"),
          integer("swizzle", "S", "tile columns per strip of the raster (8)", 1, 64)};
}

Options plan_knobs() {
  return Options{text("tile", "MxN", "GEMM tile of plain tables (128x128)")} + tile_order_knobs() +
         Options{text("machine", "FILE", "a machine profile (weft tune --calibrate); default: built-in H200 figures"),
          // chunked
          text("template", "T", "chunked: swizzle, ring, 2d, pull or partition"),
          integer("chunks", "N", "chunked: chunks per shard or block (0: the template's default)", 0, 4096),
          text("backend", "B", "chunked: copy_engine or sm"),
          integer("comm-sms", "N", "chunked (sm backend) and tilelink: SMs given to communication", 0, kMaxSms),
          integer("group-size", "N", "chunked 2d: ranks per group (0: the largest divisor of W <= sqrt(W))", 0, 1024),
          text("schedule", "FILE", "chunked: a user's JSON chunk schedule"),
          // tilelink
          integer("comm-tile-rows", "N", "tilelink: rows per communication tile (0: the model's pick)", 0, kMaxDimension),
          text("order", "O", "tilelink ag_gemm: ring or all_to_all"),
          // decomposed, fused
          text("ag-source", "S", "decomposed and fused ag_gemm: pull (peers pull A from symmetric memory) or push (A pushed from the caller's memory)"),
          // sequential MoE
          flag("per-expert-moe-gemm", "sequential ag_moe/moe_rs: a library GEMM per expert instead of every expert in one overlap GEMM (the default)")};
}

// Where the ranks are: plan and check lay plans out for it (strategies that would load/store across
// it decline, naming the ranks).
Options topology_knobs() {
  return {integer("nodes", "N", "nodes the ranks are spread over, consecutive ranks on each; load/store within a node only", 1,
                  kMaxPlanWorld),
          flag("no-p2p", "no rank loads or stores another's memory (what WEFT_P2P=0 makes a GPU run assume)")};
}

Options signal_knobs() {
  return {integer("gemm-sms", "N", "signal: SMs its GEMM keeps (0: the profile's)", 0, kMaxSms),
          flag("gemm-cta-per-tile", "signal: a CTA per tile instead of a persistent GEMM"),
          text("partition", "LIST", "signal: wave groups, e.g. 1,2,2 (default: the predictive search)"),
          text("restore", "P", "signal: after_each_group, own_stream or at_end"),
          integer("comm-chunks", "N", "fused ag_gemm: row chunks each peer's shard is pulled in (0: one)", 0, 4096)};
}

std::vector<CommandSpec> build() {
  const OptionSpec world_list = integers("world", "LIST", "world sizes, each 1 .. the visible GPUs (default: all of them)", 1, 1024);
  const OptionSpec gpu_world = integer("world", "W", "ranks the suites' shapes are cut for", 1, 1024);
  const OptionSpec csv = text("csv", "FILE", "write the table as CSV");
  const OptionSpec json = text("json", "FILE", "write the rows as JSON");
  const OptionSpec seed = integer("seed", "S", "seed of inputs and routings (1)", 0, std::numeric_limits<int64_t>::max());
  const OptionSpec machine = text("machine", "FILE", "a machine profile (weft tune --calibrate)");
  const OptionSpec suite = text("suite", "NAME|FILE", "bench/NAME.json or a JSON suite");
  const OptionSpec suites = list("suite", "LIST", "suites (names or files)");
  const OptionSpec ops = list("op", "LIST", "ops (default: every op)");
  const OptionSpec strategy_list = list("strategy", "LIST", "strategies (default: every strategy)");
  std::vector<CommandSpec> all;
  all.push_back({"bench", "time strategies against sequential on the local GPUs (without a GPU: check the suite's plans on the CPU)",
                 "Every rank is a thread of this process. Each row is first checked against sequential, then timed\n"
                 "(GEMM alone, communication alone, sequential, each strategy; interleaved per iteration).",
                 Options{suite, world_list, ops, strategy_list, json, csv, seed,
                         text("dtype", "T", "bf16 (default) or e4m3: FP8 operands and their scales, the caller's (strategies that cannot "
                                            "run them on the GPU decline, saying why)"),
                         text("scaling", "S", "with --dtype e4m3: tensor or row")} +
                     timing(20) + plan_knobs() + signal_knobs()});
  all.push_back({"bench gemm", "the overlap GEMM against cuBLASLt on GPU 0 over the suites' per-rank GEMM shapes", "",
                 Options{suites, gpu_world, list("gemm", "MxNxK,...", "these GEMM shapes instead of the suites'"), csv, seed, machine,
                         text("dtype", "T", "bf16 (default) or e4m3: the overlap GEMM's FP8 main loop (128x128) against cuBLASLt's FP8 matmul"),
                         text("scaling", "S", "with --dtype e4m3: tensor or row")} +
                     timing(20) + tile_order_knobs()});
  all.push_back({"bench rmsnorm", "RMSNorm of signal's restored result vs RMSNorm reading it where signal left it (GPU 0)", "",
                 Options{suites, gpu_world, csv, seed, machine} + timing(50)});
  all.push_back({"bench kernels", "the auxiliary kernels (copy, reduce, permute, box moves, top-k combine, RMSNorm) at the suites' sizes "
                                  "against the copy engine moving the same bytes (GPU 0)", "",
                 Options{suites, gpu_world, csv, seed} + timing(20)});
  all.push_back({"bench tilelink", "TileLink's microbenchmark: the companion's copy bandwidth by CTAs, the GEMM by SMs given to communication", "",
                 Options{integers("ctas", "LIST", "companion CTAs for the copy table", 1, kMaxSms),
                         integers("comm-sms", "LIST", "SMs given to communication for the GEMM table", 0, kMaxSms),
                         list("gemm", "MxNxK,...", "GEMM shapes"), integer("copy-mib", "N", "MiB each copy moves (256)", 1, 1 << 16),
                         integer("comm-tile-rows", "N", "rows per communication tile (1024)", 1, kMaxDimension), csv, machine} +
                     timing(20)});
  all.push_back({"characterize", "FiCCO's decomposition and contention losses for a suite's AllGather+GEMM rows", "",
                 Options{suite, world_list, csv, seed} + timing(20)});
  all.push_back({"tune", "measure the machine, signal's partitions, strategies' knobs, or judge auto and the simulator",
                 "One mode:\n"
                 "  --calibrate        GPU 0's GEMM rate, HBM bandwidth and NCCL curves into a machine profile (--out)\n"
                 "  --partitions       signal's predicted vs measured time per wave partition\n"
                 "  --strategy S       search S's knobs, time the best --keep N, write them into the tuning table (--out)\n"
                 "  --from-results     a tuning table of the rows under --results, merged into --out where it exists\n"
                 "  --check-auto       auto on every recorded shape, left out of the table it chooses by\n"
                 "  --fit-simulator    fit the simulator's constants to the recorded rows (--out: the fitted profile)\n"
                 "  --fp8-accuracy     the --machine profile with its FP8 prediction accuracy from the recorded FP8 rows (--out, else in place)",
                 Options{flag("calibrate", "measure GPU 0 and the NCCL curves"), flag("partitions", "signal's partition study"),
                         text("strategy", "S", "the strategy whose knobs to search"), integer("keep", "N", "settings timed (3)", 1, 1000),
                         flag("from-results", "build a tuning table from recorded rows"), flag("check-auto", "judge auto offline"),
                         flag("fit-simulator", "fit the simulator"), flag("fp8-accuracy", "the FP8 rows' prediction accuracy"), text("results", "DIR", "recorded rows (bench/results)"),
                         text("out", "FILE", "where the profile or table goes"), suite, ops, world_list, machine,
                         integer("max-partitions", "N", "partitions per row (12)", 1, 10000),
                         integer("gemm-sms", "N", "signal's GEMM SMs (0: the profile's)", 0, kMaxSms),
                         text("restore", "P", "signal's restore placement"), csv, seed} +
                     timing(20)});
  all.push_back({"simulate", "predict a call's time per strategy from the machine profile (the plan's third executor)",
                 "  --check-results DIR replays every row weft bench recorded there (world >= 2): error per strategy\n"
                 "  (--csv FILE: the rows as CSV); otherwise one problem, every strategy that has its op (or --strategy)",
                 one_problem() + plan_knobs() +
                     Options{integer("world", "W", "ranks (any size the simulator can lay out)", 1, kMaxPlanWorld),
                             list("strategy", "LIST", "strategies (default: every one the op has)"),
                             text("trace", "FILE", "Chrome/Perfetto trace of the first strategy"),
                             text("check-results", "DIR", "judge the simulator on recorded rows"),
                             text("csv", "FILE", "with --check-results: write the rows as CSV")}});
  all.push_back({"check", "prove plans on the CPU: validate, run the reference executor, compare with the op's definition", "",
                 Options{ops, strategy_list, integers("world", "LIST", "world sizes (1,2,3,4,8)", 1, kMaxPlanWorld), seed,
                         flag("routing-on-device", "MoE ops: the choices given per call on the device, routed by the plan (sequential)")} +
                     dtype_knobs() + topology_knobs()});
  all.push_back({"plan", "print one plan and its validation report", "",
                 one_problem() + plan_knobs() +
                     Options{integer("world", "W", "ranks (2)", 1, kMaxPlanWorld),
                             text("strategy", "S", "the strategy (sequential; chunked with --schedule)"),
                             flag("summary", "per rank: steps by kind, tiles, waits, notifies, bytes moved (instead of every step)")} +
                     topology_knobs()});
  // Last: the fuzz corpus picks a command by its index (tests/fuzz/fuzz_arguments.cpp), so new commands go at the end.
  all.push_back({"bench attention", "the attention kernel alone on GPU 0, causal and not, in TFLOP/s (FLOPs of the tiles it computes, and of the attention itself: exact TF/s)", "",
                 Options{list("attention", "TxHxGxD,...", "tokens x heads x kv heads x head dim (default: GQA and MHA at 4k-16k tokens)"), csv,
                         seed} +
                     timing(20)});
  return all;
}

}  // namespace

const OptionSpec* CommandSpec::find(const std::string& option) const {
  for (const OptionSpec& o : options)
    if (o.name == option) return &o;
  return nullptr;
}

const std::vector<CommandSpec>& command_specs() {
  static const std::vector<CommandSpec> all = build();
  return all;
}

const CommandSpec& find_command(const std::string& name) {
  std::string known;
  for (const CommandSpec& c : command_specs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  throw std::invalid_argument("unknown command '" + name + "' (commands: " + known + "; weft --help)");
}

std::string command_help(const CommandSpec& spec) {
  std::ostringstream out;
  out << "weft " << spec.name << ": " << spec.summary << "\n";
  if (!spec.details.empty()) out << spec.details << "\n";
  out << "\noptions:\n";
  for (const OptionSpec& o : spec.options) {
    std::string left = "  --" + o.name + (o.value.empty() ? "" : " " + o.value);
    if (left.size() < 30) left.resize(30, ' ');
    out << left << " " << o.help;
    if ((o.kind == OptionKind::integer || o.kind == OptionKind::integers) && o.max != std::numeric_limits<int64_t>::max())
      out << " [" << o.min << ".." << o.max << "]";
    out << "\n";
  }
  return out.str();
}

}  // namespace weft::cli
