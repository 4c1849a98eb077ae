#!/usr/bin/env bash
# The fault drill: W ranks of build-device/tests/gpu/weft_fault_drill (one process per GPU, started
# here rather than by torchrun, which would kill the others when one dies); the last rank (a) dies
# by SIGKILL in the middle of a call, (b) skips a call, (c) makes a call with other shapes; and a
# control run with no fault. Per strategy (decomposed: device barriers and signals between ranks;
# sequential: NCCL alone). Passes when, within WEFT_COLLECTIVE_TIMEOUT_S plus a margin, every
# process has exited and every other rank raised an error naming the op and the faulty rank (or the
# NCCL collective a rank has not joined). Usage: bash scripts/fault_drill.sh W [BINARY]
set -u
world=${1:?usage: fault_drill.sh WORLD [BINARY]}
binary=${2:-build-device/tests/gpu/weft_fault_drill}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export WEFT_COLLECTIVE_TIMEOUT_S=${WEFT_COLLECTIVE_TIMEOUT_S:-20} WEFT_DEVICE_WAIT_TIMEOUT_MS=${WEFT_DEVICE_WAIT_TIMEOUT_MS:-5000}
margin=30
faulty=$((world - 1))
logs=${OUT:-/tmp}/fault_drill; mkdir -p "$logs"
failed=0
port=$((29600 + RANDOM % 2000))
for strategy in decomposed sequential; do
  for fault in none kill skip shapes; do
    port=$((port + 3))
    start=$(date +%s)
    pids=()
    for r in $(seq 0 $((world - 1))); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$binary" --fault $fault --faulty $faulty --at 3 --calls 6 --op ag_gemm --strategy $strategy > "$logs/${strategy}_${fault}_rank$r.log" 2>&1 &
      pids+=($!)
    done
    limit=$((WEFT_COLLECTIVE_TIMEOUT_S + margin))
    hung=""
    for r in $(seq 0 $((world - 1))); do
      while kill -0 "${pids[$r]}" 2>/dev/null && [ $(( $(date +%s) - start )) -lt $limit ]; do sleep 0.5; done
      if kill -0 "${pids[$r]}" 2>/dev/null; then hung="$hung $r"; kill -9 "${pids[$r]}"; fi
      wait "${pids[$r]}" 2>/dev/null
    done
    seconds=$(( $(date +%s) - start ))
    verdict=PASS; why=""
    [ -n "$hung" ] && { verdict=FAIL; why="ranks$hung still running after ${limit} s (killed);"; }
    for r in $(seq 0 $((world - 1))); do
      log="$logs/${strategy}_${fault}_rank$r.log"
      line=$(grep -m1 "^drill: rank $r:" "$log" || echo "no drill line")
      if [ "$fault" = none ]; then
        grep -q "^drill: rank $r: finished 6 calls" "$log" || { verdict=FAIL; why="$why rank $r did not finish its calls ($line);"; }
      elif [ "$r" -ne "$faulty" ]; then
        if ! grep -q "^drill: rank $r: raised" "$log"; then
          verdict=FAIL; why="$why rank $r raised nothing ($line);"
        elif ! grep "^drill: rank $r: raised" "$log" | grep -q "ag_gemm m="; then
          verdict=FAIL; why="$why rank $r's error does not name the op;"
        elif ! grep "^drill: rank $r: raised" "$log" | grep -qE "rank $faulty\b|raised by rank $faulty|NCCL|has not joined"; then
          verdict=FAIL; why="$why rank $r's error names neither rank $faulty nor the collective it waits in;"
        fi
      fi
    done
    [ "$verdict" = FAIL ] && failed=1
    echo "drill $strategy/$fault at world $world: $verdict after ${seconds} s ${why}"
    for r in $(seq 0 $((world - 1))); do grep -m1 "^drill:" "$logs/${strategy}_${fault}_rank$r.log" | cut -c1-400 | sed 's/^/  /'; done
  done
done
exit $failed
