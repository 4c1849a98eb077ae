#!/usr/bin/env bash
# Runs a GPU job longer than one device-tool call (10 minutes) without idling the machine between
# calls: `start CMD...` launches CMD in a session of its own (it outlives the call that started it),
# writing its logs and results under $RUN_DIR; `wait SECONDS` waits until it ends or SECONDS pass,
# then packs everything it wrote so far into $OUT/run.tgz and prints the progress lines. Chain calls:
#   bash scripts/device_session.sh start bash scripts/several_gpus.sh && bash scripts/device_session.sh wait 560
#   bash scripts/device_session.sh wait 560      # the next call, on the same warm machine
# `status` prints the progress alone; the job writes "$RUN_DIR/done" with its exit code when it ends.
set -uo pipefail
run_dir=${RUN_DIR:-/tmp/weft_run}
what=${1:-}; shift || true
pack() {
  local out=${OUT:-out}; mkdir -p "$out"
  tar -czf "$out/run.tgz" -C "$run_dir" --exclude='*.core' . 2>/dev/null
  ls -la "$out/run.tgz" | awk '{print "packed", $5, "bytes"}'
}
case "$what" in
  start)
    [ $# -gt 0 ] || { echo "device_session: start needs a command" >&2; exit 2; }
    if [ -f "$run_dir/pid" ] && kill -0 "$(cat "$run_dir/pid")" 2>/dev/null; then
      echo "device_session: a job is running already (pid $(cat "$run_dir/pid"))" >&2; exit 2
    fi
    rm -rf "$run_dir"; mkdir -p "$run_dir"
    # setsid: the job is not killed when the call that started it returns.
    RUN_DIR="$run_dir" OUT="$run_dir" setsid bash -c '"$@" > "$RUN_DIR/job.log" 2>&1; echo $? > "$RUN_DIR/done"' job "$@" < /dev/null &
    echo $! > "$run_dir/pid"
    echo "device_session: started pid $(cat "$run_dir/pid") at $(date -u +%H:%M:%S): $*"
    ;;
  wait)
    limit=${1:-560}; start=$(date +%s)
    while [ ! -f "$run_dir/done" ] && [ $(( $(date +%s) - start )) -lt "$limit" ]; do sleep 5; done
    [ -f "$run_dir/done" ] && echo "device_session: job ended with exit code $(cat "$run_dir/done")" || echo "device_session: job still running after ${limit} s"
    cat "$run_dir/progress" 2>/dev/null | tail -60
    pack
    ;;
  status)
    cat "$run_dir/progress" 2>/dev/null | tail -60; [ -f "$run_dir/done" ] && echo "done: exit $(cat "$run_dir/done")"
    ;;
  *) echo "usage: device_session.sh start CMD... | wait SECONDS | status" >&2; exit 2 ;;
esac
