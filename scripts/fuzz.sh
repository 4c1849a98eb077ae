#!/usr/bin/env bash
# Builds weft's libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer, no CUDA)
# and runs each for FUZZ_SECONDS (60) over a copy of its seed corpus in tests/fuzz/corpus. A crash
# leaves its input in build-asan/crashes/<target>/ and fails the script; turn it into a regression
# test by adding it to tests/fuzz/corpus/<target>/regressions/ (valid/ holds inputs that must be
# accepted). The targets run side by side, FUZZ_JOBS at a time (default: the cores). Usage:
# scripts/fuzz.sh [target ...] (readers arguments plans).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-asan}
seconds=${FUZZ_SECONDS:-60}
seed=${FUZZ_SEED:-0}  # 0: libFuzzer picks one; CI fixes it, so that a run is repeatable
requested=("$@")
[ ${#requested[@]} -gt 0 ] || requested=(readers arguments plans)
targets=()  # each once: two jobs of one target would share its corpus folder
for t in "${requested[@]}"; do [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t"); done
jobs=${FUZZ_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_JOBS must be a positive integer, got '$jobs'" >&2; exit 2; }
# The same build as scripts/sanitize.sh asan (one clang build serves both).
source "$root/scripts/clang_asan_build.sh"
configure_asan_build "$build" || exit 1
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}") > "$build.build.log" 2>&1 || { grep -E "error" -A3 "$build.build.log" | head -40; exit 1; }
fuzz_one() {  # target: runs it, writes its findings and stats to its summary, exits 1 on a finding
  local t=$1 work="$build/corpus/$1" crashes="$build/crashes/$1" code=0
  rm -rf "$work" && mkdir -p "$work" "$crashes"
  # Valid seeds and past findings alike (valid/, regressions/), flattened into one working corpus.
  find "$root/tests/fuzz/corpus/$t" -type f -exec cp {} "$work/" \; || return 1
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -seed="$seed" -max_len=8192 -rss_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$crashes/" -print_final_stats=1 "$work" > "$build/fuzz_$t.log" 2>&1 || code=1
  { echo "fuzz_$t: ${seconds}s"
    [ $code = 0 ] || grep -E "ERROR|SUMMARY|Test unit written" "$build/fuzz_$t.log" | head -10 || true
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov: " "$build/fuzz_$t.log" | tail -3 || true; } > "$build/fuzz_$t.summary"
  return $code
}
status=0
pids=()
trap 'kill $(jobs -p) 2> /dev/null || true' EXIT  # no fuzzer outlives the script
for t in "${targets[@]}"; do
  rm -f "$build/fuzz_$t.summary"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  fuzz_one "$t" & pids+=($!)
done
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  wait "${pids[$i]}" || status=1
  cat "$build/fuzz_$t.summary" 2> /dev/null || echo "fuzz_$t: failed before it ran (see $build/fuzz_$t.log, if any)"
done
exit $status
