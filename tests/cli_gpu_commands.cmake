# The `weft` commands that need a GPU (included by tests/CMakeLists.txt).
#
# Without a GPU: CUDA_VISIBLE_DEVICES=-1 hides every GPU, so these run alike on any machine and each
# must print exactly its "no GPU found" line and exit 3 (kExitNoGpu, tools/weft/on_gpus.hpp): a run
# the user asked for that could not happen must not exit 0. Label cpu.
#
# With GPUs (WEFT_GPU_TESTS, label gpu): the real, short runs; each must exit 0, print its result
# line and no mismatch. scripts/gpu_check.sh runs them (quick-tests: ctest -R weft_cli_gpu).

# weft_cli_without_gpu(NAME COMMAND VERB ARGS...): `weft ARGS` with no GPU visible.
function(weft_cli_without_gpu name command verb)
  string(REPLACE " " "[ ]" command_regex "${command}")
  weft_cli_test(${name} 3 stdout "^weft ${command_regex}: no GPU found \\(.+\\); nothing to ${verb}\\.$" "warning: option" 30 ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "CUDA_VISIBLE_DEVICES=-1")
endfunction()

weft_cli_without_gpu(weft_cli_bench_gemm_without_gpu "bench gemm" time bench gemm --suite default --warmup 1 --iterations 3)
weft_cli_without_gpu(weft_cli_bench_rmsnorm_without_gpu "bench rmsnorm" time bench rmsnorm --suite flashoverlap_ar --world 1 --warmup 1 --iterations 3)
weft_cli_without_gpu(weft_cli_bench_kernels_without_gpu "bench kernels" time bench kernels --suite default --warmup 1 --iterations 3)
weft_cli_without_gpu(weft_cli_bench_attention_without_gpu "bench attention" time bench attention --attention 1024x8x2x64 --warmup 1 --iterations 3)
weft_cli_without_gpu(weft_cli_bench_tilelink_without_gpu "bench tilelink" time bench tilelink --iterations 2)
weft_cli_without_gpu(weft_cli_characterize_without_gpu characterize measure characterize --suite default --world 1 --warmup 1 --iterations 2)
weft_cli_without_gpu(weft_cli_tune_calibrate_without_gpu tune measure tune --calibrate --out ${CMAKE_CURRENT_BINARY_DIR}/machine_profile_never_written.json
                     --warmup 1 --iterations 3)
weft_cli_without_gpu(weft_cli_tune_partitions_without_gpu tune measure tune --partitions --suite flashoverlap_ar --world 1 --max-partitions 2 --iterations 2)
weft_cli_without_gpu(weft_cli_tune_strategy_without_gpu "tune --strategy" measure tune --strategy chunked --suite default --op gemm_rs --world 1 --keep 1
                     --iterations 2 --out ${CMAKE_CURRENT_BINARY_DIR}/tuning_never_written.json)

if(WEFT_GPU_TESTS AND WEFT_HAVE_CUDA)
  # weft_cli_on_gpu(NAME EXPECT REJECT ARGS...): a short real run on the visible GPUs.
  function(weft_cli_on_gpu name expect reject)
    weft_cli_test(${name} 0 stdout "${expect}" "no GPU found|warning: option${reject}" 280 ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 300 RESOURCE_LOCK weft_gpus)
  endfunction()
  # Every result checked against cuBLASLt.
  weft_cli_on_gpu(weft_cli_gpu_bench_gemm "cuBLASLt throughput over" "|MISMATCH|did not match" bench gemm --suite default --warmup 1 --iterations 3)
  # The fused result checked against the plain one.
  weft_cli_on_gpu(weft_cli_gpu_bench_rmsnorm "restore\\+plain" "|DIFFERS|differed" bench rmsnorm --suite flashoverlap_ar --world 1 --warmup 1 --iterations 3)
  # Every kernel's output checked.
  weft_cli_on_gpu(weft_cli_gpu_bench_kernels "fraction of the copy roofline" "|FAILED|differed" bench kernels --suite default --warmup 1 --iterations 3)
  # Sampled rows of every run checked against the host; a timed row for both head dims.
  weft_cli_on_gpu(weft_cli_gpu_bench_attention " 64 +yes .* ok" "|FAILED|differed" bench attention --attention 1000x4x2x64,777x4x4x128 --warmup 1 --iterations 3)
  # At least one measured row under the header (world 1: the GEMM's decomposition losses).
  weft_cli_on_gpu(weft_cli_gpu_characterize "CIL NCCL.* 1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+\\.[0-9][0-9][0-9] " "" characterize --suite default --world 1
                  --warmup 1 --iterations 2)
  weft_cli_on_gpu(weft_cli_gpu_tune_partitions "predictor: mean absolute error ratio" "|did not match" tune --partitions --suite flashoverlap_ar --world 1
                  --max-partitions 2 --iterations 2)
  # The profile --calibrate writes, read back by the machine-profile loader and used: `weft simulate`
  # names the profile's device and source (the calibration) where the built-in one says H200 figures.
  set(_weft_profile ${CMAKE_CURRENT_BINARY_DIR}/calibrated_machine_profile.json)
  weft_cli_on_gpu(weft_cli_gpu_tune_calibrate "collective curves -> ${_weft_profile}" "" tune --calibrate --out ${_weft_profile} --warmup 1 --iterations 3)
  weft_cli_on_gpu(weft_cli_gpu_calibrated_profile_simulates " on .+ \\(weft tune --calibrate \\([0-9]+ timed runs, median\\)\\)"
                  "" simulate --machine ${_weft_profile} --op gemm_rs --world 4 --m 4096 --n 4096 --k 4096)
  set_tests_properties(weft_cli_gpu_tune_calibrate PROPERTIES FIXTURES_SETUP weft_calibrated_profile)
  set_tests_properties(weft_cli_gpu_calibrated_profile_simulates PROPERTIES FIXTURES_REQUIRED weft_calibrated_profile)
endif()
