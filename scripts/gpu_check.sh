#!/usr/bin/env bash
# Builds weft with the GPU tests on a GPU machine, runs them, then the benchmark. Used through the
# device tool:  bash scripts/gpu_check.sh [tests|quick-tests|bench|gemm|all] [extra weft bench options...]
#   gemm: `weft bench gemm` (overlap GEMM vs cuBLASLt on GPU 0). A hung GPU test: scripts/hang_probe.sh.
#   quick-tests: the GPU test binary once, in one process (NCCL initialised once instead of per test:
#   minutes less at world 4), the 1,000-call tests apart, then the torchrun tests through ctest.
# Logs and results go to $OUT (or ./out). CUTLASS headers come from .deps (carried; no network there).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
what=${1:-all}; shift || true
out=${OUT:-out}; mkdir -p "$out"
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8
cmake --version | head -1
cmake -S . -B build-device -G Ninja -DWEFT_GPU_TESTS=ON -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
( time cmake --build build-device ) > "$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -60; exit 1; }
tail -3 "$out/build.log"
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  ctest --test-dir build-device -L gpu --timeout ${CTEST_TIMEOUT:-90} --output-on-failure ${CTEST_ARGS:-} > "$out/gpu_tests.log" 2>&1 || status=1
  grep -E "Passed|Failed|\*\*\*|tests passed|tests failed|Timeout" "$out/gpu_tests.log" | tail -40
fi
if [ "$what" = quick-tests ]; then
  binary=build-device/tests/gpu/weft_gpu_tests
  timeout -s KILL ${TESTS_TIMEOUT:-240} $binary --gtest_filter='-*Thousand*' > "$out/gpu_tests.log" 2>&1 || status=1
  timeout -s KILL ${CTEST_TIMEOUT:-90} $binary --gtest_filter='*Thousand*' >> "$out/gpu_tests.log" 2>&1 || status=1
  ctest --test-dir build-device -L gpu -R torchrun --timeout 300 --output-on-failure >> "$out/gpu_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests passed|tests failed|Failed|Timeout" "$out/gpu_tests.log" | tail -20
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  ./build-device/weft bench --json "$out/bench.json" --csv "$out/bench.csv" "$@" 2> "$out/bench.err" | tee "$out/bench.txt" || status=1
  tail -5 "$out/bench.err"
fi
if [ "$what" = gemm ]; then
  ./build-device/weft bench gemm --csv "$out/gemm.csv" "$@" 2> "$out/gemm.err" | tee "$out/gemm.txt" || status=1
  tail -5 "$out/gemm.err"
fi
exit $status
