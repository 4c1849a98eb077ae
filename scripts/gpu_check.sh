#!/usr/bin/env bash
# Builds weft with the GPU tests on a GPU machine, runs them, then the benchmark. Used through the
# device tool:  bash scripts/gpu_check.sh [MODE[,MODE...]] [extra weft bench options...]
#   MODE: tests, quick-tests, back-to-back, example, bench, gemm; all = tests,bench (the default).
#   example: install the build, build examples/tp_mlp against it and run it on GPU 0 (world 1), and
#   under torchrun on every GPU where there are several.
#   python: the Python GPU tests (pytest -m gpu: torch ops, compile, CUDA graphs, layers) on GPU 0
#   and under torchrun on every GPU, then `python -m weft.benchmark` on every GPU (TORCH_BENCH_ARGS).
#   gemm: `weft bench gemm` (overlap GEMM vs cuBLASLt on GPU 0). A hung GPU test: scripts/hang_probe.sh.
#   kernels: `weft bench kernels` (the auxiliary kernels against the copy roofline, GPU 0; KERNELS_ARGS).
#   attention: the attention kernel's GPU tests, ag_attention's plans and weft::AttentionOp at world 1
#   (and 2), the overlap GEMM tests, compute-sanitizer memcheck of the kernel tests, `weft bench
#   attention` (ATTENTION_ARGS), then the torch op and layer (python/tests/test_attention_torch.py).
#   tilelink: `weft bench tilelink` (companion copy bandwidth by CTAs, GEMM by SMs given to communication).
#   nccl-only: with WEFT_P2P=0 (no load/store between ranks; NCCL's own transports, and at world > 1
#   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 as well): the op API's tests of every strategy and
#   `weft bench` of the strategies that communicate through NCCL alone.
#   memcheck: compute-sanitizer memcheck on the executor's and the op API's GPU tests (world 1),
#   racecheck and synccheck on the executor's plans against the reference.
#   tune: `weft tune --strategy chunked` on one suite row at world 1 (the knob search end to end).
#   quick-tests: the GPU test binary once, in one process (NCCL initialised once instead of per test:
#   minutes less at world 4), the 1,000-call tests apart, then through ctest the torchrun tests and
#   the GPU commands' short real runs (weft_cli_gpu_*: bench gemm/rmsnorm/kernels, characterize, tune
#   --partitions, tune --calibrate and `weft simulate` on the profile it wrote).
#   back-to-back: brackets a hang of the 1,000 back-to-back calls (one process, a thread per GPU):
#   queue depth 1 and 8 (WEFT_MAX_CALLS_IN_FLIGHT), NCCL_LAUNCH_MODE=GROUP, each bounded by
#   WEFT_COLLECTIVE_TIMEOUT_S (the executor then prints its unmet waits); then host stacks of a hung run.
# Logs and results go to $OUT (or ./out). CUTLASS headers come from .deps (carried; no network there).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The system compiler: the image's CC/CXX (/opt/gcc) link parts of libstdc++ statically into every
# shared library (devtoolset style), and weft's libraries then crash in iostreams in a process that
# loaded the system libstdc++ first (any Python process that imported numpy or torch).
unset CC CXX CUDAHOSTCXX
what=${1:-all}; shift || true
[ "$what" = all ] && what=tests,bench
wants() { [[ ",$what," == *",$1,"* ]]; }
out=${OUT:-out}; mkdir -p "$out"
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8
gpus=$(nvidia-smi -L | wc -l)
cmake --version | head -1
cmake -S . -B build-device -G Ninja -DWEFT_GPU_TESTS=ON -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
( time cmake --build build-device ) > "$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -60; exit 1; }
tail -3 "$out/build.log"
status=0
if wants tests; then
  ctest --test-dir build-device -L gpu --timeout ${CTEST_TIMEOUT:-90} --output-on-failure ${CTEST_ARGS:-} > "$out/gpu_tests.log" 2>&1 || status=1
  grep -E "Passed|Failed|\*\*\*|tests passed|tests failed|Timeout" "$out/gpu_tests.log" | tail -40
fi
if wants quick-tests; then
  binary=build-device/tests/gpu/weft_gpu_tests
  timeout -s KILL ${TESTS_TIMEOUT:-240} $binary --gtest_filter='-*Thousand*' > "$out/gpu_tests.log" 2>&1 || status=1
  timeout -s KILL ${CTEST_TIMEOUT:-90} $binary --gtest_filter='*Thousand*' >> "$out/gpu_tests.log" 2>&1 || status=1
  ctest --test-dir build-device -L gpu -R 'torchrun|weft_cli_gpu' --timeout 300 --output-on-failure >> "$out/gpu_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests passed|tests failed|Failed|Timeout" "$out/gpu_tests.log" | tail -20
fi
if wants example; then
  rm -rf build-device/example && cmake --install build-device --prefix build-device/example/prefix > "$out/example.log" 2>&1 &&
    cmake -S examples/tp_mlp -B build-device/example/build -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build-device/example/prefix" >> "$out/example.log" 2>&1 &&
    cmake --build build-device/example/build >> "$out/example.log" 2>&1 &&
    timeout -s KILL 120 build-device/example/build/tp_mlp 2>&1 | tee -a "$out/example.log" || { status=1; tail -20 "$out/example.log"; }
  if [ "$gpus" -gt 1 ]; then
    timeout -s KILL 180 torchrun --standalone --nproc_per_node=$gpus --no-python build-device/example/build/tp_mlp 2>&1 | grep -E "tp_mlp|rror" | tee -a "$out/example.log" ||
      status=1
  fi
fi
if wants python; then
  export PYTHONPATH="$PWD/build-device/python:$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}"
  timeout -s KILL ${PYTEST_TIMEOUT:-600} python3 -m pytest -q -p no:cacheprovider -m gpu python/tests > "$out/python_tests.log" 2>&1 || status=1
  tail -15 "$out/python_tests.log"
  if [ "$gpus" -gt 1 ]; then
    timeout -s KILL ${PYTEST_TIMEOUT:-600} torchrun --standalone --nproc_per_node=$gpus -m pytest -q -p no:cacheprovider -m gpu python/tests \
      > "$out/python_tests_torchrun.log" 2>&1 || status=1
    grep -E "passed|failed|error" "$out/python_tests_torchrun.log" | tail -6
  fi
  timeout -s KILL ${TORCH_BENCH_TIMEOUT:-600} torchrun --standalone --nproc_per_node=$gpus -m weft.benchmark --csv "$out/torch_bench.csv" \
    ${TORCH_BENCH_ARGS:-} > "$out/torch_bench.txt" 2>&1 || status=1
  tail -40 "$out/torch_bench.txt"
  # The package as pip installs it (no network there: the build backend is the image's), used from torch.
  rm -rf /tmp/weft_site && python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/weft_site . > "$out/pip.log" 2>&1 &&
    PYTHONPATH=/tmp/weft_site python3 -c "import torch, weft.torch as wt; wt.init(); a = torch.randn(256, 128, device='cuda', dtype=torch.bfloat16); b = torch.randn(512, 128, device='cuda', dtype=torch.bfloat16); c = torch.ops.weft.ag_gemm(a, b); print('pip-installed weft from', wt.__file__, 'ag_gemm error', ((c.float() - a.float() @ b.float().t()).norm() / (a.float() @ b.float().t()).norm()).item())" || { status=1; tail -20 "$out/pip.log"; }
fi
if wants nccl-only; then
  binary=build-device/tests/gpu/weft_gpu_tests
  export WEFT_P2P=0
  [ "$gpus" -gt 1 ] && export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
  timeout -s KILL ${TESTS_TIMEOUT:-300} $binary --gtest_filter='*OpOnCallerBuffers*:Op.*:OpGraph.*:*ExecutorMatchesReference*:-*Thousand*' \
    > "$out/nccl_only_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/nccl_only_tests.log" | tail -20
  ./build-device/weft bench --strategy ${NCCL_ONLY_STRATEGIES:-sequential,signal,two_level,decomposed,auto} --iterations 10 --warmup 3 \
    --csv "$out/nccl_only_bench.csv" "$@" 2> "$out/nccl_only_bench.err" | tee "$out/nccl_only_bench.txt" || status=1
  tail -5 "$out/nccl_only_bench.err"
  unset WEFT_P2P NCCL_P2P_DISABLE NCCL_SHM_DISABLE
fi
if wants memcheck; then
  binary=build-device/tests/gpu/weft_gpu_tests
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  export WEFT_TEST_WORLD=1
  for tool in memcheck racecheck synccheck; do
    case $tool in
      memcheck) filter='Executor.*:*ExecutorMatchesReference*:*OpOnCallerBuffers*:Op.*:-*Thousand*:*GivesUp*:*CannotFinish*' ;;
      *) filter=${RACECHECK_FILTER:-'*ExecutorMatchesReference*'} ;;
    esac
    start=$(date +%s)
    timeout -s KILL ${SANITIZER_TIMEOUT:-240} "$sanitizer" --tool $tool --error-exitcode 99 --print-limit 20 --report-api-errors no $binary --gtest_filter="$filter" \
      > "$out/sanitizer_$tool.log" 2>&1
    code=$?
    echo "compute-sanitizer $tool: exit $code after $(( $(date +%s) - start )) s; $(grep -cE '^\[       OK \]' "$out/sanitizer_$tool.log") test(s) passed; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1)"
    grep -E "^\[  FAILED  \]|Invalid|Race|hazard" "$out/sanitizer_$tool.log" | head -8
    [ $code -eq 0 ] || status=1
  done
  unset WEFT_TEST_WORLD
fi
if wants tune; then
  ./build-device/weft tune --strategy chunked --suite default --op gemm_rs --world 1 --keep 2 --iterations 5 --warmup 2 --out "$out/tuning_chunked.json" \
    2> "$out/tune.err" | tee "$out/tune.txt" | tail -15 || status=1
  tail -5 "$out/tune.err"
fi
if wants back-to-back; then
  binary=build-device/tests/gpu/weft_gpu_tests
  export WEFT_COLLECTIVE_TIMEOUT_S=${WEFT_COLLECTIVE_TIMEOUT_S:-20}
  run=0
  for setting in WEFT_MAX_CALLS_IN_FLIGHT=8 WEFT_MAX_CALLS_IN_FLIGHT=1 NCCL_LAUNCH_MODE=GROUP; do
    start=$(date +%s%N); run=$((run + 1))
    env "$setting" timeout -s KILL 60 $binary --gtest_filter='Executor.ThousandBackToBack*' > "$out/back_to_back_$run.log" 2>&1
    code=$?
    printf '%-28s exit %3d after %6d ms: ' "$setting" $code $(( ($(date +%s%N) - start) / 1000000 ))
    grep -E "^\[  (PASSED|FAILED) |did not finish|has not finished|unmet|waits for" "$out/back_to_back_$run.log" | head -6 | tr '\n' ' '; echo
    [ $code -eq 0 ] || status=1
  done
  [ $status -eq 0 ] || bash scripts/hang_probe.sh $binary 'Executor.ThousandBackToBack*' 1 35
fi
if wants bench; then
  ./build-device/weft bench --json "$out/bench.json" --csv "$out/bench.csv" "$@" 2> "$out/bench.err" | tee "$out/bench.txt" || status=1
  tail -5 "$out/bench.err"
fi
if wants tilelink; then
  ./build-device/weft bench tilelink --csv "$out/tilelink.csv" ${TILELINK_ARGS:-} 2> "$out/tilelink.err" | tee "$out/tilelink.txt" || status=1
  tail -5 "$out/tilelink.err"
fi
if wants kernels; then
  ./build-device/weft bench kernels --csv "$out/kernels.csv" ${KERNELS_ARGS:-} 2> "$out/kernels.err" | tee "$out/kernels.txt" || status=1
  tail -5 "$out/kernels.err"
fi
if wants attention; then
  # The attention kernel alone, then ag_attention's plans through the executor at world 1 (and 2 where
  # there are two GPUs), the overlap GEMM tests (the producer wait both kernels share), the kernel
  # under compute-sanitizer, and its speed.
  t=build-device/tests/gpu/weft_gpu_tests
  timeout 600 $t --gtest_filter='*AttentionKernel*' > "$out/attention_kernel.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED)|Failure|error" "$out/attention_kernel.log" | head -30
  for w in 1 2; do
    [ "$w" -le "$gpus" ] || continue
    WEFT_TEST_WORLD=$w timeout 600 $t --gtest_filter='*AttentionPlans*:*AttentionOp*' > "$out/attention_plans_w$w.log" 2>&1 || status=1
    grep -E "^\[  (PASSED|FAILED)" "$out/attention_plans_w$w.log"
  done
  timeout 600 $t --gtest_filter='*OverlapGemm*' > "$out/attention_overlap_gemm_regression.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED)" "$out/attention_overlap_gemm_regression.log"
  timeout 600 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $t --gtest_filter='*AttentionKernel*' > "$out/attention_memcheck.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/attention_memcheck.log"
  ./build-device/weft bench attention --csv "$out/attention.csv" ${ATTENTION_ARGS:-} 2> "$out/attention.err" | tee "$out/attention.txt" || status=1
  tail -5 "$out/attention.err"
  # Through PyTorch: torch.ops.weft.ag_attention and weft.torch.SequenceParallelAttention (GPU 0).
  PYTHONPATH="$PWD/build-device/python:$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}" timeout 600 python3 -m pytest -q -p no:cacheprovider -m gpu \
    python/tests/test_attention_torch.py > "$out/attention_torch.log" 2>&1 || status=1
  grep -E "[0-9]+ (passed|failed)|^FAILED" "$out/attention_torch.log" | tail -8
fi
if wants gemm; then
  ./build-device/weft bench gemm --csv "$out/gemm.csv" "$@" 2> "$out/gemm.err" | tee "$out/gemm.txt" || status=1
  tail -5 "$out/gemm.err"
fi
exit $status
