// What each `weft` command accepts: its options, each with a kind, a range and a line of help. The
// parser (arguments.hpp) rejects anything else before a command runs, and `weft <command> --help`
// prints the command's table.
#pragma once

#include "weft/plan/plan_bounds.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace weft::cli {

enum class OptionKind { flag, integer, integers, text, list };

struct OptionSpec {
  std::string name;
  OptionKind kind = OptionKind::text;
  std::string value;  // what the value looks like in help ("N", "LIST", "FILE")
  std::string help;
  int64_t min = std::numeric_limits<int64_t>::min();  // integer and integers kinds
  int64_t max = std::numeric_limits<int64_t>::max();
};

struct CommandSpec {
  std::string name;     // "plan", "bench gemm", ...
  std::string summary;  // one line
  std::string details;  // more lines, printed by --help
  std::vector<OptionSpec> options;

  const OptionSpec* find(const std::string& option) const;
};

// Every command, in the order `weft --help` lists them.
const std::vector<CommandSpec>& command_specs();
// Throws std::invalid_argument naming the known commands when `name` is not one.
const CommandSpec& find_command(const std::string& name);
// The help of one command: summary, details, options with their values, ranges and help.
std::string command_help(const CommandSpec& spec);

// The bounds the CPU-side commands hold plans to: weft/plan/plan_bounds.hpp (kMaxPlanWorld, ...).

}  // namespace weft::cli
