// Runs a fuzz target's LLVMFuzzerTestOneInput over every file under the corpus directories it is
// given, without libFuzzer: the seed corpora and the inputs of past findings (tests/fuzz/corpus)
// become regression tests of the plain build (gcc, no sanitizers), run by ctest on every CI run.
// Seeds under a valid/ folder must be accepted (fuzz_rejection.hpp): the replay fails, naming the
// seed and the reason, when one is refused. Crash reproducers live under regressions/ and may be
// refused; they must not crash.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_rejection.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t inputs = 0, valid = 0, refused = 0;
  for (int i = 1; i < argc; ++i)
    for (const auto& entry : std::filesystem::recursive_directory_iterator(argv[i])) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.eof() && in.fail()) {
        std::printf("%s: cannot be read\n", entry.path().c_str());
        return 1;
      }
      weft::fuzz::must_accept = entry.path().parent_path().filename() == "valid";
      std::printf("%s%s (%zu bytes)\n", entry.path().filename().c_str(), weft::fuzz::must_accept ? " [valid]" : "", bytes.size());
      std::fflush(stdout);
      try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      } catch (const weft::fuzz::ValidInputRefused& e) {
        std::printf("  FAILED: a valid seed was refused: %s\n", e.what());
        ++refused;
      }
      valid += weft::fuzz::must_accept;
      ++inputs;
    }
  std::printf("%zu input(s) replayed, %zu of them valid seeds, %zu valid seed(s) refused\n", inputs, valid, refused);
  // A corpus without valid seeds would test nothing but the absence of crashes.
  return inputs > 0 && valid > 0 && refused == 0 ? 0 : 1;
}
