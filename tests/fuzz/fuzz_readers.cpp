// Fuzz target: weft's JSON readers (the JSON parser itself, suites, machine profiles, tuning tables
// and chunk schedules). The first byte picks the reader; the rest is the text. A reader may reject
// its input only with std::invalid_argument (a message naming the byte and the field); any other
// exception, a crash or a sanitizer report is a finding. Seeds under corpus/readers/valid/ must be
// accepted (fuzz_rejection.hpp).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "bench_suite.hpp"
#include "common/json.hpp"
#include "fuzz_rejection.hpp"
#include "weft/model/machine_profile.hpp"
#include "weft/model/tuning_table.hpp"
#include "weft/plan/chunked.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 5) {
      case 0: weft::Json::parse(text); break;
      case 1: weft::parse_suite(text); break;
      case 2: weft::parse_machine_profile(text); break;
      case 3: weft::parse_tuning_table(text); break;
      case 4: weft::parse_schedule_json(text); break;
    }
  } catch (const std::invalid_argument& e) {
    weft::fuzz::rejected(e);
  }
  return 0;
}
