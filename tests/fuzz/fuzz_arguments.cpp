// Fuzz target: the command line. The input is split at NUL bytes into argv words; the first byte
// picks a command. Every command's option table parses them, then the problem, plan options and
// the plan-size bound are read as `weft plan` and `weft check` read them. Rejection is
// std::invalid_argument (what the tool prints with exit 2); anything else is a finding. Seeds under
// corpus/arguments/valid/ must be accepted (fuzz_rejection.hpp).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "fuzz_rejection.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& commands = weft::cli::command_specs();
  const weft::cli::CommandSpec& spec = commands[data[0] % commands.size()];
  std::vector<std::string> words(1, "weft");
  std::string word;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0) {
      words.push_back(word);
      word.clear();
    } else {
      word.push_back(static_cast<char>(data[i]));
    }
  }
  if (!word.empty()) words.push_back(word);
  if (words.size() > 64) return 0;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    const weft::cli::Arguments args(static_cast<int>(argv.size()), argv.data(), 1, spec);
    if (spec.name == "plan" || spec.name == "simulate") {
      const weft::Problem problem = weft::cli::problem_from(args);
      const weft::PlanOptions options = weft::cli::plan_options_from(args);
      weft::require_plan_fits(problem, options);
    } else if (spec.name == "check") {
      weft::cli::ops_from(args);
      weft::cli::strategies_from(args);
      args.integers("world", {1});
    }
  } catch (const std::invalid_argument& e) {
    weft::fuzz::rejected(e);
  }
  return 0;
}
