// Command-line options of the `weft` tool: --name value pairs and --flags, parsed once, read by name.
#pragma once

#include "weft/plan/plan_bounds.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "command_specs.hpp"
#include "weft/plan/strategies.hpp"

namespace weft::cli {

class Arguments {
 public:
  // argv from `first` on, checked against the command's table before anything runs: an unknown,
  // repeated or valueless option, a flag given a value, or a stray word throws std::invalid_argument
  // naming it. Reading an integer checks its range (the table's); lists reject empty items.
  Arguments(int argc, char** argv, int first, const CommandSpec& spec);

  bool flag(const std::string& name) const;
  std::string text(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  std::vector<std::string> list(const std::string& name, const std::vector<std::string>& fallback) const;
  std::vector<int> integers(const std::string& name, const std::vector<int>& fallback) const;
  // Names given but never read: reported so that a typo is not silently ignored.
  std::vector<std::string> unread() const;

 private:
  const OptionSpec& spec_of(const std::string& name) const;

  const CommandSpec& spec_;
  std::map<std::string, std::string> values_;
  mutable std::map<std::string, bool> read_;
};

// --op, --m, --n, --k, --world, --seed (routing for gemm_a2a, choices for the MoE ops), --experts,
// --topk (the MoE ops), --batch, --heads, --kv-heads, --head-dim, --causal (ag_attention, instead of
// --n and --k), --input-dtype, --output-dtype.
Problem problem_from(const Arguments& args);
// --dtype (or --input-dtype), --b-dtype, --output-dtype, --scaling and --b-layout into the problem's fields.
void dtypes_from(const Arguments& args, Problem& problem);
// --op LIST (default: every op) and --strategy LIST (default: every strategy); unknown names throw.
// with_attention: ag_attention too by default (commands that run on the CPU only; the GPU commands'
// default stays the GEMM family, which has kernels).
std::vector<OpKind> ops_from(const Arguments& args, bool with_attention = false);
std::vector<std::string> strategies_from(const Arguments& args);
// A suite's file: NAME is bench/NAME.json, a path (with '/' or ending in .json) is taken as is.
std::string suite_path(const std::string& name);
// --world LIST (default: all `visible` GPUs); each must be 1..visible.
std::vector<int> world_sizes_from(const Arguments& args, int visible);
// --tile MxN, --raster along_m|along_n, --swizzle S, --machine FILE (a machine profile), and the
// chunked options below.
PlanOptions plan_options_from(const Arguments& args);
// --nodes N (consecutive ranks per node, load/store within a node) or --no-p2p (none at all) for a
// world of `world` ranks; neither: none (one node, every pair reaches the other).
std::optional<Topology> topology_from(const Arguments& args, int world);
// chunked: --template swizzle|ring|2d|pull|partition --chunks N --backend copy_engine|sm
// --comm-sms N --group-size N --schedule FILE (a user's JSON schedule).
void chunked_options_from(const Arguments& args, ChunkedOptions& options);
// signal: --gemm-sms N --gemm-cta-per-tile --partition LIST --restore P; fused: --comm-chunks N.
void signal_options_from(const Arguments& args, PlanOptions& options);
// tilelink: --comm-sms N (the companion's SMs) --comm-tile-rows N --order ring|all_to_all.
void tilelink_options_from(const Arguments& args, TileLinkOptions& options);
// The strategy knobs above (--schedule, --template, --chunks, --backend, --group-size, --comm-sms,
// --comm-tile-rows, --order) given where none of the chosen strategies reads them: refused with
// the reason, instead of silently ignored.
void require_knobs_apply(const Arguments& args, const std::vector<std::string>& strategy_names);
// A strategy named for an op it has no plan for: refused, naming the ops it takes.
void require_supports(const Strategy& strategy, OpKind op);
// "MxNxK" as {M, N, K} (or `parts` 'x'-separated positive integers); throws std::invalid_argument
// naming the text.
std::vector<int64_t> parse_shape(const std::string& text, size_t parts = 3);

}  // namespace weft::cli
