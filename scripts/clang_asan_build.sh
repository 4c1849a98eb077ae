# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures the one clang build both use
# (AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer's coverage on every object, the CPU tests
# and the fuzz targets; no CUDA, no Python).
configure_asan_build() {  # build dir
  command -v clang++ > /dev/null || { echo "clang++ is needed (Debian: apt-get install clang)" >&2; return 1; }
  local flags="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
  cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DWEFT_ENABLE_CUDA=OFF -DWEFT_PYTHON=OFF -DWEFT_BUILD_TESTS=ON -DWEFT_FUZZ=ON "-DCMAKE_CXX_FLAGS=$flags" > "$1.configure.log" 2>&1 ||
    { tail -20 "$1.configure.log"; return 1; }
}
