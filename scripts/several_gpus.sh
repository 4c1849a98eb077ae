#!/usr/bin/env bash
# The several-GPU run: one call of this per machine does every world size it is given, stage by
# stage, and writes a progress line per step (for scripts/device_session.sh, which keeps it running
# across device-tool calls). Usage:
#   WORLDS="4 2" STAGES=tests,python,bench,suites,torch,nccl-only bash scripts/several_gpus.sh
# WORLDS: the world sizes, each on the first W GPUs (default: every GPU). STAGES_W: the stages at
# world W (default STAGES), run in the order named. STAGES (default: all):
#   probe      weft bench (threads in one process, decomposed ag_gemm) under scripts/hang_probe.sh:
#              the host stacks if it stalls
#   hangs      the one-process cases that stall at world 4 (the 1,000-call tests, FiCCO's op cases) under
#              the hang probe with device waits longer than it, so that each thread's host stack is taken
#              while the peers still wait; with this stage, `tests` leaves both out
#   tests      the GPU test binary in one process at world W (WEFT_TEST_WORLD; ONE_PROCESS_FILTER narrows
#              it), the multi-process check under torchrun with W ranks, the GPU command-line tests once
#   python     pytest -m gpu under torchrun with W ranks
#   bench      weft bench --suite default, every strategy and auto
#   suites     weft bench over the paper suites (SUITES, default flux_gpt3, tilelink_mlp,
#              tilelink_moe_tp, flashoverlap_ar, moe_models, attention_sp) and, unless SUITE_EXTRAS=0, ag_gemm pushing from the
#              caller's memory and FiCCO's GPT-3 AllGather table (every FiCCO schedule)
#   torch      python -m weft.benchmark under torchrun (every strategy, default, AsyncTP, the TP MLP; the
#              tilelink_moe_tp rows against plain torch's MoE),
#              the model step (llama3-8b prefill and train, llama3-70b and mixtral-8x7b train; 2 blocks) and the
#              sequence-parallel attention rows (--attention); TORCH_RUNS (default "ops moe models attention")
#              and MODEL_STEPS (default every model:mode above) choose among them; TORCH_ITERATIONS (default
#              20): the timed calls per variant of the ops run
#   nccl-only  WEFT_P2P=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the op tests of every strategy and the
#              NCCL-only strategies' bench (with no load/store every rank is its own node: two_level's
#              network rounds run for real)
#   endurance  10,000 back-to-back calls per op and strategy, eager and replayed (weft_endurance)
#   faults     scripts/fault_drill.sh: a rank killed, a rank that skips a call, a rank with other shapes
#   simulate   weft simulate --check-results over this run's bench rows
# Logs and results go under $OUT/wW/; the progress lines to $OUT/progress.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset CC CXX CUDAHOSTCXX
out=${OUT:-out}; mkdir -p "$out"
progress="$out/progress"
gpus=$(nvidia-smi -L | wc -l)
worlds=${WORLDS:-$gpus}
stages=${STAGES:-probe,tests,python,bench,torch,suites,nccl-only,endurance,faults,simulate}
wants() { [[ ",$stages," == *",$1,"* ]]; }
say() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$progress"; }
# Processes a stage may leave behind: torchrun's workers run in sessions of their own, so a timeout
# that kills torchrun can leave them spinning on the GPUs, slowing every stage after it.
leftovers='weft_gpu_tests|weft_multiprocess_check|weft_endurance|weft_fault_drill|build-device/weft |pytest|weft\.benchmark'
# This script and the commands that started it (a wrapper's command line can name a test binary)
# are never reaped.
ancestors=" $$ "; parent=$$
while parent=$(ps -o ppid= -p "$parent" 2>/dev/null | tr -d ' ') && [ -n "$parent" ] && [ "$parent" -gt 1 ]; do ancestors+="$parent "; done
reap() {  # kills what a stage left running on the GPUs and says so
  local pids pid
  pids=$(for pid in $(pgrep -f "$leftovers"); do [[ $ancestors == *" $pid "* ]] || echo "$pid"; done)
  [ -z "$pids" ] && return 0
  say "  killing $(echo $pids | wc -w) process(es) the stage left running: $(ps -o args= -p $(echo $pids | tr ' ' ',') 2>/dev/null | cut -c1-80 | sort | uniq -c | tr '\n' ';')"
  kill -9 $pids 2>/dev/null; sleep 2
}
timed() {  # timed LABEL LOG SECONDS CMD...: runs CMD bounded, logs, says the exit code and the time
  local label=$1 log=$2 limit=$3; shift 3
  local t0=$(date +%s)
  # TERM first, so that torchrun stops its workers; KILL 20 s later.
  timeout -k 20 -s TERM "$limit" "$@" > "$log" 2>&1
  local code=$?
  say "$label: exit $code after $(( $(date +%s) - t0 )) s"
  reap
  return $code
}
visible() { seq -s, 0 $(( $1 - 1 )); }

# The simulator's machine description for these GPUs: h100.json where there is one, else h200.json.
machine_file=bench/machines/h200.json
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H100 && [ -f bench/machines/h100.json ]; then
  machine_file=bench/machines/h100.json
fi
nvidia-smi -L > "$out/gpus.txt"; nvidia-smi topo -m >> "$out/gpus.txt" 2>&1
# The device's copy of .git may lag the working tree: the sources' fingerprint says what was built
# (the same command here gives the commit's).
fingerprint=$(git ls-files -z src include tools bench/lib tests python/src python/weft scripts CMakeLists.txt | xargs -0 cat | sha1sum | cut -c1-12)
say "machine: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); worlds: $worlds; stages: $stages; sources $fingerprint; model $machine_file"
cmake -S . -B build-device -G Ninja -DWEFT_GPU_TESTS=ON -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" > "$out/configure.log" 2>&1 ||
  { say "configure failed"; tail -30 "$out/configure.log"; exit 1; }
timed "build" "$out/build.log" 900 cmake --build build-device || { grep -E "error" -A3 "$out/build.log" | head -40; exit 1; }
weft=./build-device/weft
binary=build-device/tests/gpu/weft_gpu_tests
export PYTHONPATH="$PWD/build-device/python:$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}"
status=0

# The command-line tests once, where some world's stages (STAGES_W, else STAGES) name tests.
cli_tests=0
for w in $worlds; do per_world="STAGES_$w"; [[ ",${!per_world:-$stages}," == *",tests,"* ]] && cli_tests=1; done
if [ $cli_tests = 1 ]; then
  timed "GPU command-line tests (GPU 0)" "$out/cli_gpu_tests.log" 300 ctest --test-dir build-device -L gpu -R 'weft_cli_gpu' --timeout 120 --output-on-failure || status=1
  say "  $(grep -E 'tests passed|tests failed' "$out/cli_gpu_tests.log" | tail -1)"
fi

# The stages; each reads w (the world size), d (its results folder), cvd (its GPUs) and wbench.
stage_tests() {
  # The call-timeout test runs apart, under the hang probe: where it hangs, the rest of the binary
  # still runs and the probe prints the host stacks.
  WEFT_TEST_WORLD=$w OUT=$d timed "world $w call-timeout test (hang probe)" "$d/call_timeout_probe.log" 200 \
    bash scripts/hang_probe.sh $binary 'Op.ACallAPeerNeverJoins*' 1 60 || status=1
  say "  $(grep -E '^run|still running' "$d/call_timeout_probe.log" | head -2 | tr '\n' ' ')"
  # FiCCO's op cases apart, under the hang probe: where they hang in one process (a thread per GPU),
  # the rest of the binary still runs and the probe prints the host stacks.
  WEFT_TEST_WORLD=$w timed "world $w GPU tests (one process)" "$d/gpu_tests.log" ${ONE_PROCESS_LIMIT_S:-480} $binary \
    --gtest_filter="${ONE_PROCESS_FILTER:-*}-*Thousand*:Op.ACallAPeerNeverJoins*:*Op*.*ficco*" || status=1
  say "  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$d/gpu_tests.log" | tr '\n' ' ') $(grep -E '^\[  FAILED  \] [A-Z]' "$d/gpu_tests.log" | head -8 | tr '\n' ' ')"
  if ! wants hangs; then
  # Short call and device-wait timeouts: where a call hangs, the executor reports its unmet waits
  # (cuda-gdb, the only debugger there, takes longer than the probe to attach).
  WEFT_COLLECTIVE_TIMEOUT_S=20 WEFT_DEVICE_WAIT_TIMEOUT_MS=10000 WEFT_TEST_WORLD=$w OUT=$d timed "world $w FiCCO op tests, one process (hang probe)" \
    "$d/ficco_probe.log" 240 bash scripts/hang_probe.sh $binary '*Op*.*ficco*' 1 ${FICCO_PROBE_S:-60} || status=1
  say "  $(grep -E '^run|still running|^\[  (PASSED|FAILED)' "$d/ficco_probe.log" | head -3 | tr '\n' ' ')"
  # THOUSAND_ENV (e.g. "CUDA_DEVICE_MAX_CONNECTIONS=32 WEFT_DEVICE_WAIT_TIMEOUT_MS=60000"): the environment of
  # this run alone, to tell a late rank from one that cannot proceed.
  WEFT_TEST_WORLD=$w timed "world $w GPU tests, 1,000-call ${THOUSAND_ENV:-}" "$d/gpu_tests_thousand.log" 180 env ${THOUSAND_ENV:-} $binary --gtest_filter='*Thousand*' || status=1
  say "  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$d/gpu_tests_thousand.log" | tr '\n' ' ')"
  fi
  CUDA_VISIBLE_DEVICES=$cvd timed "world $w multi-process check (torchrun)" "$d/multiprocess.log" 300 \
    torchrun --standalone --nproc_per_node=$w --no-python build-device/tests/gpu/weft_multiprocess_check || status=1
  say "  $(grep -c ' ok' "$d/multiprocess.log") ok lines, $(grep -c MISMATCH "$d/multiprocess.log") mismatches"
}

stage_hangs() {
  # Device and call waits longer than the probe: the stacks are taken while every rank still waits.
  local filter
  for filter in '*Thousand*' '*Op*.*ficco*'; do
    mkdir -p "$d/hang_${filter//[^a-zA-Z]/}"  # the probe's test log and stacks, one folder per filter
    WEFT_DEVICE_WAIT_TIMEOUT_MS=300000 WEFT_COLLECTIVE_TIMEOUT_S=300 WEFT_TEST_WORLD=$w OUT=$d/hang_${filter//[^a-zA-Z]/} WEFT_HOST_STACKS_DIR=$d/hang_${filter//[^a-zA-Z]/} \
      timed "world $w one process, $filter (hang probe, ${HANG_PROBE_S:-60} s)" "$d/hang_probe_${filter//[^a-zA-Z]/}.log" $(( ${HANG_PROBE_S:-60} + 60 )) \
      bash scripts/hang_probe.sh $binary "$filter" 1 ${HANG_PROBE_S:-60} || status=1
    say "  $(grep -E '^run|still running|^\[  (PASSED|FAILED)' "$d/hang_probe_${filter//[^a-zA-Z]/}.log" | head -3 | tr '\n' ' ')"
    # The probe itself exits 0: a hang or a failing run is in its log.
    grep -qE '^still running|^run [0-9]+: exit [1-9]' "$d/hang_probe_${filter//[^a-zA-Z]/}.log" && status=1
  done
}

stage_python() {
  # Each rank's output in its own file (torchrun --log-dir), a failure printed as it happens
  # (WEFT_PYTEST_REPORT_NOW, conftest.py), and the stacks of a test that runs over 120 s.
  CUDA_VISIBLE_DEVICES=$cvd WEFT_PYTEST_REPORT_NOW=1 timed "world $w pytest -m gpu (torchrun)" "$d/pytest_torchrun.log" ${PYTEST_LIMIT_S:-360} \
    torchrun --standalone --nproc_per_node=$w --log-dir "$d/pytest_ranks" --redirects 3 --tee 3 -m pytest -q -p no:cacheprovider -m gpu \
    -o faulthandler_timeout=120 -rfE python/tests || status=1
  say "  $(grep -E '[0-9]+ (passed|failed)' "$d/pytest_torchrun.log" | tail -$w | sort | uniq -c | tr '\n' ' ')"
  grep -h "^WEFT-FAILED" -r "$d/pytest_ranks" 2>/dev/null | cut -c1-200 | sort | uniq -c | head -20 >> "$progress"
}

stage_probe() {
  # weft bench with a thread per GPU, with and without replayed calls; device waits longer than the
  # probe, so that a stall is still there when it takes the host stacks.
  printf '{"name": "probe", "description": "one AllGather row", "rows": [{"name": "MLP-1 AG", "op": "ag_gemm", "m": 8192, "n": 11008, "k": 4096, "source": "TileLink Table 4"}]}' > "$d/probe_suite.json"
  for replay in 1 0; do
    WEFT_REPLAY_CALLS=$replay WEFT_DEVICE_WAIT_TIMEOUT_MS=200000 WEFT_COLLECTIVE_TIMEOUT_S=150 OUT=$d bash scripts/hang_probe.sh --command 60 \
      "$d/probe_bench_replay$replay.log" -- $weft bench --world $w --suite "$d/probe_suite.json" --strategy decomposed --iterations 5 --warmup 2 \
      > "$d/probe_replay$replay.txt" 2>&1
    say "world $w bench probe (WEFT_REPLAY_CALLS=$replay): $(head -1 "$d/probe_replay$replay.txt")"
  done
}

stage_bench() {
  timed "world $w weft bench default" "$d/bench_default.txt" 900 $wbench --suite default --json "$d/bench_default.json" \
    --csv "$d/bench_default.csv" --machine "$machine_file" || status=1
  grep -E " (ok|MISMATCH)$" "$d/bench_default.txt" | head -80 >> "$progress"
}

stage_torch() {
  local runs=" ${TORCH_RUNS:-ops moe models attention} "
  [[ $runs == *" ops "* ]] && { CUDA_VISIBLE_DEVICES=$cvd timed "world $w weft.benchmark default" "$d/torch_bench.txt" 900 \
    torchrun --standalone --nproc_per_node=$w -m weft.benchmark --suite default --iterations "${TORCH_ITERATIONS:-20}" \
    --csv "$d/torch_bench.csv" || status=1; }
  # TileLink's MoE rows through torch.ops.weft.ag_moe / moe_rs against plain torch's loop over experts
  # and torch._grouped_mm.
  [[ $runs == *" moe "* ]] && { CUDA_VISIBLE_DEVICES=$cvd timed "world $w weft.benchmark tilelink_moe_tp" "$d/torch_bench_moe.txt" 600 \
    torchrun --standalone --nproc_per_node=$w -m weft.benchmark --suite tilelink_moe_tp --no-mlp --csv "$d/torch_bench_moe.csv" || status=1; }
  # The model step: decoder blocks of weft.torch.blocks against the same blocks on plain torch.
  [[ $runs == *" models "* ]] && for model_mode in ${MODEL_STEPS:-llama3-8b:prefill llama3-8b:train llama3-70b:train mixtral-8x7b:train}; do
    CUDA_VISIBLE_DEVICES=$cvd timed "world $w model step ${model_mode/:/ }" "$d/model_${model_mode/:/_}.txt" 300 \
      torchrun --standalone --nproc_per_node=$w -m weft.benchmark --model ${model_mode%%:*} --mode ${model_mode##*:} --layers 2 \
      --csv "$d/model_${model_mode/:/_}.csv" || status=1
    tail -4 "$d/model_${model_mode/:/_}.txt" >> "$progress"
  done
  [[ $runs == *" models "* ]] && { python3 scripts/plot_model_step.py "$d/model_steps.png" "$d"/model_*.csv > /dev/null 2>&1 || say "  (no model-step chart: matplotlib missing or no step ran)"; }
  [[ $runs == *" attention "* ]] || return 0
  # Sequence-parallel attention: weft's ag_attention (each strategy, default) against all_gather + SDPA.
  CUDA_VISIBLE_DEVICES=$cvd timed "world $w weft.benchmark --attention" "$d/torch_attention.txt" 300 \
    torchrun --standalone --nproc_per_node=$w -m weft.benchmark --attention --csv "$d/torch_attention.csv" || status=1
  grep -E "^attn" "$d/torch_attention.txt" >> "$progress"
}

stage_suites() {
  for suite in ${SUITES:-tilelink_mlp flux_gpt3 flashoverlap_ar tilelink_moe_tp moe_models attention_sp}; do
    timed "world $w weft bench $suite" "$d/bench_$suite.txt" 900 $wbench --suite $suite --json "$d/bench_$suite.json" \
      --csv "$d/bench_$suite.csv" --machine "$machine_file" || status=1
  done
  # sequential MoE with a library GEMM per expert (--per-expert-moe-gemm), against the default
  # grouped GEMM of bench_tilelink_moe_tp's sequential rows of this run (the baseline here is per
  # expert too). In a folder of its own: its rows are named sequential but are another plan, which
  # bench/results' readers must not mix in.
  if [[ " ${SUITES:-tilelink_moe_tp} " == *" tilelink_moe_tp "* ]]; then
    mkdir -p "$d/per_expert_moe"
    timed "world $w weft bench tilelink_moe_tp, sequential with a GEMM per expert" "$d/per_expert_moe/bench_tilelink_moe_tp.txt" 300 $wbench \
      --suite tilelink_moe_tp --strategy sequential --per-expert-moe-gemm --csv "$d/per_expert_moe/bench_tilelink_moe_tp.csv" --machine "$machine_file" || status=1
  fi
  [ "${SUITE_EXTRAS:-1}" = 1 ] || return 0  # SUITE_EXTRAS=0: the suites alone
  timed "world $w decomposed and fused ag_gemm pushing from the caller's memory" "$d/bench_ag_push.txt" 600 $wbench --suite tilelink_mlp \
    --op ag_gemm --strategy decomposed,fused --ag-source push --csv "$d/bench_ag_push.csv" --machine "$machine_file" || status=1
  timed "world $w FiCCO GPT-3 AllGather table" "$d/bench_flux_gpt3_ficco.txt" 600 $wbench --suite flux_gpt3 --op ag_gemm \
    --strategy decomposed,ficco,ficco_uniform_fused_1d,ficco_hetero_fused_1d,ficco_hetero_unfused_1d,ficco_uniform_fused_2d \
    --csv "$d/bench_flux_gpt3_ficco.csv" --machine "$machine_file" || status=1
}

stage_nccl_only() {
  ( export WEFT_P2P=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    # The op API plans on the communicator's topology (no load/store here): every strategy that can
    # run here does. The executor tests build plans for a single node, so only the strategies that
    # need no load/store run there; the Op tests of a fixed P2P strategy are left out.
    WEFT_TEST_WORLD=$w timed "world $w NCCL-only op tests" "$d/nccl_only_tests.log" 420 $binary \
      --gtest_filter='*OpOnCallerBuffers*sequential*:*OpOnCallerBuffers*signal*:*OpOnCallerBuffers*two_level*:*OpOnCallerBuffers*auto*:*OpOnCallerBuffers*default*:*OpOnCallerBuffers*gemm_ar_*:*ExecutorMatchesReference*sequential:*ExecutorMatchesReference*signal:*ExecutorMatchesReference*gemm_ar_*:Op.Rejects*:Op.PlanPrepare*:Op.TheLastCalls*:Op.ACallAPeerNeverJoins*:Op.RanksThatDisagree*:-*Thousand*'
    say "  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$d/nccl_only_tests.log" | tr '\n' ' ')"
    timed "world $w NCCL-only bench" "$d/nccl_only_bench.txt" 600 $wbench --suite default \
      --strategy sequential,signal,two_level,decomposed,chunked,auto --csv "$d/nccl_only_bench.csv" --machine "$machine_file" ) || status=1
}

stage_endurance() {
  [ -x build-device/tests/gpu/weft_endurance ] || { say "world $w endurance: not built, skipped"; return; }
  CUDA_VISIBLE_DEVICES=$cvd timed "world $w endurance (10,000 calls per op x strategy, eager and replayed)" "$d/endurance.log" 900 \
    torchrun --standalone --nproc_per_node=$w --no-python build-device/tests/gpu/weft_endurance --calls ${ENDURANCE_CALLS:-10000} || status=1
  grep -E "^rank 0:" "$d/endurance.log" | tail -40 >> "$progress"
}

stage_faults() {
  [ -f scripts/fault_drill.sh ] || { say "world $w faults: not built, skipped"; return; }
  CUDA_VISIBLE_DEVICES=$cvd timed "world $w fault drill" "$d/faults.log" 600 bash scripts/fault_drill.sh $w || status=1
  grep -E "^drill" "$d/faults.log" >> "$progress"
}

stage_simulate() {
  timed "world $w simulate vs measured" "$d/simulate_check.txt" 300 $weft simulate --check-results "$d" --machine "$machine_file" || true
  tail -3 "$d/simulate_check.txt" >> "$progress"
}

all_stages=$stages
for w in $worlds; do
  [ "$w" -le "$gpus" ] || { say "world $w: only $gpus GPUs, skipped"; continue; }
  per_world="STAGES_$w"; stages=${!per_world:-$all_stages}  # STAGES_2=bench,... : other stages at world 2
  d="$out/w$w"; mkdir -p "$d"
  cvd=$(visible "$w")
  # weft bench one process per GPU under torchrun, as users run weft (rank 0 prints the slowest
  # rank's figures); the probe stage runs it with a thread per GPU.
  wbench="env CUDA_VISIBLE_DEVICES=$cvd torchrun --standalone --nproc_per_node=$w --no-python $weft bench --world $w"
  # The stages run in the order they are named, so that a run cut short has done the first ones.
  for stage in ${stages//,/ }; do
    declare -F "stage_${stage//-/_}" > /dev/null || { say "unknown stage '$stage' (skipped)"; continue; }
    "stage_${stage//-/_}"
  done
done
say "several_gpus: done, status $status"
exit $status
