#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the reference
# executor's tests (one thread per rank and stream) under ThreadSanitizer: clang, no CUDA, no Python.
# Any finding fails the run (halt_on_error). Usage: scripts/sanitize.sh [asan] [tsan] (both by default).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(asan tsan)
configure() {  # build dir, flags
  cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DWEFT_ENABLE_CUDA=OFF -DWEFT_PYTHON=OFF "-DCMAKE_CXX_FLAGS=$2" > "$1.configure.log" 2>&1 ||
    { tail -20 "$1.configure.log"; exit 1; }
  # The test binary alone: the TSan step runs nothing else.
  cmake --build "$1" --target weft_cpu_tests > "$1.build.log" 2>&1 || { grep -E "error" -A3 "$1.build.log" | head -40; exit 1; }
}
status=0
for w in "${what[@]}"; do
  case $w in
    asan)
      build="$root/build-asan"
      source "$root/scripts/clang_asan_build.sh"
      configure_asan_build "$build" || exit 1
      cmake --build "$build" --target weft_cpu_tests weft_tool > "$build.build.log" 2>&1 ||
        { grep -E "error" -A3 "$build.build.log" | head -40; exit 1; }
      export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
      # Every CPU test but those that build other projects or need Python, the replay of every
      # recorded bench row through auto, the slowest case by far under ASan (the readers and auto it
      # uses run under ASan in other tests), the FP8 plan properties but at world 2 (924 cases, over
      # 700 s under ASan; the same builders and checks run in them at world 2), and the real-sized
      # suites at world 8 and weft bench's plan checks (about 400 s of the run under ASan; the same
      # builders and validators run under ASan at every world in BuilderProperty, and the readers in
      # their own tests): all run in the plain build.
      ctest --test-dir "$build" -L cpu -E "python|pip|consumer|ci_runs|weft_cli_auto_never_slower_on_recorded_rows|Fp8BuilderProperty.*_w[13-8] |SuiteAtWorldEight|weft_cli_bench_plan_checks" -j2 --timeout 900 \
        --output-on-failure > "$build.ctest.log" 2>&1 || status=1
      grep -E "tests passed|tests failed|Failed|ERROR: AddressSanitizer|runtime error" "$build.ctest.log" | head -20
      ;;
    tsan)
      build="$root/build-tsan"
      configure "$build" "-fsanitize=thread -g -O1"
      export TSAN_OPTIONS=halt_on_error=1
      "$build/tests/weft_cpu_tests" --gtest_filter='ReferenceExecutor*:AllStrategies/BuilderProperty*w4*:AllStrategies/Fp8BuilderProperty*/ag_gemm_*_w4:TileLinkPlans.*:FusedPlans.*:Topology.*:-ReferenceExecutor.APeerThatStops*' > "$build.tests.log" 2>&1 ||
        status=1
      grep -E "PASSED|FAILED|WARNING: ThreadSanitizer" "$build.tests.log" | head -20
      ;;
    *) echo "sanitize.sh: unknown '$w' (asan, tsan)" >&2; exit 2 ;;
  esac
done
exit $status
