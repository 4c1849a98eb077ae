#include "weft/model/shipped_defaults.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

namespace weft {

namespace shipped {
// Generated at configure time from bench/ (src/model/shipped_defaults_data.cpp.in).
extern const std::string_view kMachineProfileJson;
extern const std::string_view kTuningTableJson;
}  // namespace shipped

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

}  // namespace

const MachineProfile& shipped_machine_profile() {
  static const MachineProfile profile = parse_machine_profile(shipped::kMachineProfileJson, "weft's shipped machine profile (bench/machines/h200.json)");
  return profile;
}

const std::shared_ptr<const TuningTable>& shipped_tuning_table() {
  static const std::shared_ptr<const TuningTable> table =
      std::make_shared<const TuningTable>(parse_tuning_table(shipped::kTuningTableJson, "weft's shipped tuning table (bench/tuning/h200.json)"));
  return table;
}

const MachineProfile& default_machine_profile() {
  static const MachineProfile profile = [] {
    const std::string path = environment("WEFT_MACHINE_PROFILE");
    if (path.empty()) return shipped_machine_profile();
    if (path == "builtin") return MachineProfile{};
    return load_machine_profile(path);
  }();
  return profile;
}

std::shared_ptr<const TuningTable> default_tuning_table() {
  static const std::shared_ptr<const TuningTable> table = []() -> std::shared_ptr<const TuningTable> {
    const std::string path = environment("WEFT_TUNING_TABLE");
    // The shipped table goes with the shipped profile: beside another machine's profile, none.
    if (path.empty()) return environment("WEFT_MACHINE_PROFILE").empty() ? shipped_tuning_table() : nullptr;
    if (path == "none") return nullptr;
    return std::make_shared<const TuningTable>(load_tuning_table(path));
  }();
  return table;
}

}  // namespace weft
