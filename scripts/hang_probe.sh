#!/usr/bin/env bash
# Runs one GPU test binary case repeatedly; when a run outlives its limit, prints every thread's
# host stack (gdb) before killing it, so a hang shows where the host is blocked.
#   bash scripts/hang_probe.sh BINARY FILTER [REPEATS] [LIMIT_S]
set -u
binary=$1 filter=$2 repeats=${3:-3} limit=${4:-40}
for i in $(seq "$repeats"); do
  "$binary" --gtest_filter="$filter" > "${OUT:-/tmp}/probe_$i.log" 2>&1 &
  pid=$!
  for _ in $(seq $((limit * 2))); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then
    echo "run $i: still running after ${limit}s; host stacks:"
    debugger=$(command -v gdb || command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
    "$debugger" -p $pid -batch -ex "thread apply all bt 25" 2>/dev/null | grep -E "^Thread|^#" | grep -v "?? ()" | cut -c1-200 | head -120
    kill -9 $pid; wait $pid 2>/dev/null
    break
  else
    wait $pid; echo "run $i: exit $?"; tail -3 "${OUT:-/tmp}/probe_$i.log"
  fi
done
