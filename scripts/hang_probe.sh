#!/usr/bin/env bash
# Runs a command; when it outlives its limit, prints every thread's host stack (cuda-gdb or gdb)
# before killing it, so a hang shows where the host is blocked.
#   bash scripts/hang_probe.sh BINARY FILTER [REPEATS] [LIMIT_S]   one GPU test case, REPEATS times
#   bash scripts/hang_probe.sh --command LIMIT_S LOG -- CMD...      any command, once
set -u
stacks() {  # stacks PID: the filtered stacks; the debugger's whole output goes to ${OUT:-/tmp}/stacks_PID.txt
  local debugger raw="${OUT:-/tmp}/stacks_$1.txt" own="${WEFT_HOST_STACKS_DIR:-/tmp}/host_stacks_$1.txt"
  # The GPU tests print their own threads' stacks on SIGUSR1 (tests/gpu/host_stacks_on_signal.cpp),
  # in a second; the debugger is the fallback for a binary without it. Only a process that catches
  # SIGUSR1 (bit 9 of SigCgt) is sent it: for any other it is fatal.
  local caught
  caught=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null)
  if [ -n "$caught" ] && (( 0x$caught & 0x200 )); then
    rm -f "$own"
    kill -USR1 "$1" 2>/dev/null; sleep 3
  fi
  if [ -s "$own" ]; then
    [ "$own" -ef "${OUT:-/tmp}/host_stacks_$1.txt" ] || cp "$own" "${OUT:-/tmp}/"
    (command -v c++filt > /dev/null && c++filt < "$own" || cat "$own") | cut -c1-220 | head -600
    return
  fi
  debugger=$(command -v gdb || command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
  timeout -s KILL ${STACKS_LIMIT_S:-30} "$debugger" -p "$1" -batch -ex "info threads" -ex "thread apply all bt 25" > "$raw" 2>&1
  if grep -qE "^#[0-9]" "$raw"; then
    grep -E "^Thread|^#" "$raw" | grep -v "?? ()" | cut -c1-200 | head -160
  else
    echo "($debugger printed no stack; its last lines:)"; tail -15 "$raw"
  fi
}
probe() {  # probe LIMIT_S LOG CMD...: 0 when CMD ends in time (its code in $probe_code), 1 when it hung
  local limit=$1 log=$2; shift 2
  "$@" > "$log" 2>&1 &
  local pid=$!
  for _ in $(seq $((limit * 2))); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then
    echo "still running after ${limit}s: $*; host stacks:"
    stacks $pid
    kill -9 $pid; wait $pid 2>/dev/null
    return 1
  fi
  wait $pid; probe_code=$?
  return 0
}
if [ "${1:-}" = --command ]; then
  limit=$2 log=$3; shift 3; [ "${1:-}" = -- ] && shift
  probe "$limit" "$log" "$@" && echo "exit $probe_code after less than ${limit}s: $*"
  exit 0
fi
binary=$1 filter=$2 repeats=${3:-3} limit=${4:-40}
for i in $(seq "$repeats"); do
  log="${OUT:-/tmp}/probe_$i.log"
  if probe "$limit" "$log" "$binary" --gtest_filter="$filter"; then
    echo "run $i: exit $probe_code"; tail -3 "$log"
  else
    break
  fi
done
