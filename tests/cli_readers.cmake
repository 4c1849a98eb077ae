# Command-line tests of the readers (strict JSON, range-checked fields, bounded regular files) and
# of the outputs (checked before and after the work, refusals instead of silent no-ops), each for a
# finding of issue 35 and each checking the message as well as the exit code. Included by
# tests/CMakeLists.txt; inputs under tests/data/readers.
set(_readers_data ${CMAKE_CURRENT_SOURCE_DIR}/data/readers)
set(_readers_out ${CMAKE_CURRENT_BINARY_DIR}/cli_readers)
file(MAKE_DIRECTORY ${_readers_out})
set(_readers_tests)

# Exit 2 and a message matching EXPECT (tests/check_cli_rejects.cmake).
function(weft_readers_reject name args expect)
  add_test(NAME weft_cli_readers_${name} COMMAND ${CMAKE_COMMAND} "-DWEFT=$<TARGET_FILE:weft_tool>" "-DARGS=${args}" "-DEXPECT=${expect}"
           -P ${CMAKE_CURRENT_SOURCE_DIR}/check_cli_rejects.cmake)
  set(_readers_tests ${_readers_tests} weft_cli_readers_${name} PARENT_SCOPE)
endfunction()
# Exit CODE and output matching EXPECT; more -D settings for tests/check_cli_output.cmake after it.
function(weft_readers_output name args code expect)
  add_test(NAME weft_cli_readers_${name} COMMAND ${CMAKE_COMMAND} "-DWEFT=$<TARGET_FILE:weft_tool>" "-DARGS=${args}" "-DCODE=${code}"
           "-DEXPECT=${expect}" ${ARGN} -P ${CMAKE_CURRENT_SOURCE_DIR}/check_cli_output.cmake)
  set(_readers_tests ${_readers_tests} weft_cli_readers_${name} PARENT_SCOPE)
endfunction()

# Readers: 64-bit values are never narrowed into an int (they were: peer 4294967297 became 1).
weft_readers_reject(schedule_peer_wraps "plan;--schedule;${_readers_data}/schedule_peer_wraps.json;--op;ag_gemm;--world;3;--m;64;--tile;32x32"
                    "schedule_peer_wraps.json: byte [0-9]+: ranks\\[0\\]\\[0\\]\\.peer: 4294967297 is out of range for an int \\(0\\.\\.1023\\)")
weft_readers_reject(suite_experts_wrap "bench;--suite;${_readers_data}/suite_experts_wrap.json"
                    "suite_experts_wrap.json: byte [0-9]+: rows\\[0\\]\\.experts: 4294967304 is out of range for an int \\(1\\.\\.1024\\)")
weft_readers_reject(profile_sm_count_wraps "simulate;--machine;${_readers_data}/profile_sm_count_wraps.json"
                    "byte [0-9]+: sm_count: 4294967428 is out of range for an int \\(1\\.\\.1024\\)")
weft_readers_reject(results_world_wraps "tune;--check-auto;--results;${_readers_data}/results_world_wraps"
                    "2026-01-01_rows.json: byte [0-9]+: rows\\[0\\]\\.world: 4294967298 is out of range for an int \\(1\\.\\.1024\\)")
# Readers: RFC 8259 only, no duplicate members, no raw control characters.
weft_readers_reject(suite_loose_number "bench;--suite;${_readers_data}/suite_loose_number.json"
                    "byte [0-9]+: rows\\[0\\]\\.n: expected ',' or '\\]' after an element, found '-'")
weft_readers_reject(suite_rows_twice "bench;--suite;${_readers_data}/suite_rows_twice.json" "byte [0-9]+: member 'rows' is given twice")
weft_readers_reject(suite_bad_escape "bench;--suite;${_readers_data}/suite_bad_escape.json" "byte [0-9]+: rows\\[0\\]\\.name: unknown escape .q")
weft_readers_reject(suite_raw_control "bench;--suite;${_readers_data}/suite_raw_control.json"
                    "byte [0-9]+: name: raw control character \\(byte 0x1b\\) in a string")
# Readers: machine profiles in plausible ranges (1e-300 FLOP/s gave -nan speedups and STUCK lines).
weft_readers_reject(profile_peak_tiny "simulate;--machine;${_readers_data}/profile_peak_tiny.json"
                    "peak_flops: 1e-300 is outside the plausible range 1e\\+11 \\.\\. 1e\\+17")
weft_readers_reject(profile_negative_seconds "simulate;--machine;${_readers_data}/profile_negative_seconds.json"
                    "collectives\\[0\\]\\.seconds\\[0\\]: -1e-05 is outside the plausible range")
# Readers: regular files only (/dev/zero was read for 2.25 GB, or ended in std::bad_alloc).
weft_readers_reject(machine_dev_zero "simulate;--machine;/dev/zero" "machine profile '/dev/zero' is not a regular file")
weft_readers_reject(suite_dev_zero "bench;--suite;/dev/zero" "suite file '/dev/zero' is not a regular file")

# Outputs: an unwritable path is refused before the work, never reported as written.
weft_readers_reject(simulate_trace_unwritable "simulate;--trace;/proc/forbidden.json" "^weft simulate: cannot write trace '/proc/forbidden.json'")
weft_readers_reject(check_results_csv_unwritable "simulate;--check-results;${_readers_data}/results_small;--csv;/proc/forbidden.csv"
                    "^weft simulate: cannot write CSV file '/proc/forbidden.csv'")
# Within check_cli_rejects' 30 s: the path is checked before the fit (it ran 28 s first).
weft_readers_reject(fit_simulator_out_unwritable "tune;--fit-simulator;--out;/proc/forbidden.json"
                    "^weft tune: cannot write machine profile '/proc/forbidden.json'")
weft_readers_reject(tune_strategy_out_unwritable "tune;--strategy;chunked;--out;/proc/forbidden.json"
                    "^weft tune: cannot write tuning table '/proc/forbidden.json'")
# Outputs: what cannot be done is refused with the reason.
weft_readers_reject(simulate_strategy_without_op "simulate;--strategy;signal;--op;ag_gemm"
                    "^weft simulate: strategy signal has no plan for ag_gemm \\(it takes gemm_rs, gemm_ar, gemm_a2a\\)")
weft_readers_reject(simulate_schedule_ignored
                    "simulate;--strategy;sequential;--schedule;${PROJECT_SOURCE_DIR}/bench/schedules/ag_ring_world3_m64.json;--op;ag_gemm;--world;3;--m;64"
                    "--schedule is read by chunked only, and the strategies chosen \\(sequential\\) would ignore it")
weft_readers_reject(plan_template_ignored "plan;--strategy;signal;--template;ring" "--template is read by chunked only")
weft_readers_reject(simulate_trace_with_check_results "simulate;--check-results;${_readers_data}/results_small;--trace;${_readers_out}/t.json"
                    "--trace is a trace of one problem's plan")
weft_readers_reject(check_world_trailing_comma "check;--world;2," "--world expects a comma-separated list of integers, got '2,'")
# One message style: the prefix once, every mode named.
weft_readers_reject(tune_no_mode "tune"
                    "^weft tune: give one of --calibrate, --partitions, --strategy S, --from-results, --check-auto, --fit-simulator or --fp8-accuracy")
weft_readers_reject(tune_two_modes "tune;--fit-simulator;--from-results" "^weft tune: give only one of")
weft_readers_reject(plan_topk_over_experts "plan;--op;ag_moe;--experts;2;--topk;4" "^weft plan: topk must be between 1 and experts \\(2\\), got 4")
if(NOT WEFT_GPU_TESTS)  # without a GPU, as bench kernels --csv is refused
  weft_readers_reject(characterize_csv_without_gpu "characterize;--csv;${_readers_out}/characterize.csv"
                      "^weft characterize: --csv: weft characterize found no GPU")
endif()

# Commands that did nothing say so and exit non-zero.
weft_readers_output(suite_all_declined "bench;--suite;${_readers_data}/suite_all_declined.json;--op;gemm_rs;--strategy;sequential;--world;2" 1
                    "no real-sized plan was validated")
weft_readers_output(check_results_huge_row "simulate;--check-results;${_readers_data}/results_huge_row" 1
                    "not predicted: this plan would hold about [0-9]+ GEMM tile entries.*weft simulate: nothing was predicted" -DNOT_EXPECT=bad_alloc)

# Success paths, with what they write read back.
string(REPLACE "." "\\." _readers_version "${PROJECT_VERSION}")
weft_readers_output(version "--version" 0 "^weft ${_readers_version}\n$")
weft_readers_output(simulate_trace "simulate;--op;gemm_ar;--m;256;--n;512;--k;512;--world;2;--strategy;decomposed,sequential;--trace;${_readers_out}/trace.json" 0
                    "decomposed +[0-9.]+ +[0-9.]+\n.*trace of decomposed written to .*sequential +[0-9.]+ +1\\.000"
                    "-DFILE=${_readers_out}/trace.json" "-DJSON_MEMBER=traceEvents" "-DFILE_EXPECT=\"strategy\":\"decomposed\"")
weft_readers_output(check_results_csv "simulate;--check-results;${_readers_data}/results_small;--csv;${_readers_out}/check.csv" 0
                    "all: +[0-9.]+% over 2 rows" "-DFILE=${_readers_out}/check.csv"
                    "-DFILE_EXPECT=^file,row,op,world,m,n,k,strategy,measured_ms.*\n2026-01-01_rows.json,\"small\",gemm_ar,2,256,512,512,decomposed,")
weft_readers_output(tune_from_results "tune;--from-results;--results;${_readers_data}/results_small;--out;${_readers_out}/tuning.json" 0
                    "1 measured shapes -> " "-DFILE=${_readers_out}/tuning.json" "-DJSON_MEMBER=entries;0;candidates")
weft_readers_output(tune_fit_simulator "tune;--fit-simulator;--results;${_readers_data}/results_small;--out;${_readers_out}/fitted.json" 0
                    "fitted profile -> " "-DFILE=${_readers_out}/fitted.json" "-DJSON_MEMBER=prediction_accuracy")
set_tests_properties(weft_cli_readers_tune_fit_simulator PROPERTIES FIXTURES_SETUP weft_fitted_profile)
# The FP8 rows' accuracy, beside the profile's bf16 one: two FP8 rows (sequential and chunked), the
# bf16 row left out.
weft_readers_output(tune_fp8_accuracy "tune;--fp8-accuracy;--results;${_readers_data}/results_fp8;--machine;${PROJECT_SOURCE_DIR}/bench/machines/h200.json;--out;${_readers_out}/fp8.json" 0
                    "FP8 prediction accuracy over 2 rows .*\n  chunked +bias .*\n  sequential +bias .*-> " "-DFILE=${_readers_out}/fp8.json"
                    "-DJSON_MEMBER=fp8_prediction_accuracy;chunked")
# The profile tune --fit-simulator wrote is one weft reads.
weft_readers_output(fitted_profile_reads_back "simulate;--machine;${_readers_out}/fitted.json;--strategy;sequential" 0 "sequential +[0-9.]+ +1\\.000")
set_tests_properties(weft_cli_readers_fitted_profile_reads_back PROPERTIES FIXTURES_REQUIRED weft_fitted_profile)
weft_readers_output(plan_summary "plan;--summary;--op;gemm_rs;--world;4;--m;4096;--n;4096;--k;1024;--strategy;decomposed" 0
                    "rank 3 +8 steps: 4 gemm \\(1024 tiles\\), 3 copy, 1 reduce.*all +32 steps: 16 gemm \\(4096 tiles\\).*plan is valid"
                    -DNOT_EXPECT=GemmStep)
# Piped, progress is one summary line on stderr.
weft_readers_output(check_progress_summary "check;--op;gemm_ar;--strategy;sequential;--world;2" 0 "weft check: 2/2 plans in [0-9.]+ s\n")

set_tests_properties(${_readers_tests} PROPERTIES LABELS cpu TIMEOUT 120)
