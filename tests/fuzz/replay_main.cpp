// Runs a fuzz target's LLVMFuzzerTestOneInput over every file of the corpus directories it is given,
// without libFuzzer: the seed corpora and the inputs of past findings (tests/fuzz/corpus) become
// regression tests of the plain build (gcc, no sanitizers), run by ctest on every CI run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i)
    for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::printf("%s (%zu bytes)\n", entry.path().filename().c_str(), bytes.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++inputs;
    }
  std::printf("%zu input(s) replayed\n", inputs);
  return inputs > 0 ? 0 : 1;
}
