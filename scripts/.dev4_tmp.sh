export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; unset CC CXX CUDAHOSTCXX
t0=$(date +%s); say() { echo "$(( $(date +%s) - t0 ))s $*"; }
nvidia-smi -L | head -4
cmake -S . -B build-device -G Ninja -DWEFT_GPU_TESTS=ON -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/configure.log 2>&1
cmake --build build-device > $OUT/build.log 2>&1 || { grep -A5 error $OUT/build.log | head -30; exit 1; }
say built
export PYTHONPATH=$PWD/build-device/python:$PWD/.deps/python
B="torchrun --standalone --nproc_per_node=4 --no-python build-device/weft bench --world 4 --machine bench/machines/h200.json"
timeout 90 $B --suite tilelink_mlp --csv $OUT/w4_bench_tilelink_mlp.csv > $OUT/w4_bench_tilelink_mlp.txt 2>&1; say "tilelink_mlp exit $?"
timeout 60 $B --suite tilelink_moe_tp --csv $OUT/w4_bench_tilelink_moe_tp.csv > $OUT/w4_bench_tilelink_moe_tp.txt 2>&1; say "moe exit $?"
timeout 100 $B --suite attention_sp --csv $OUT/w4_bench_attention_sp.csv > $OUT/w4_bench_attention_sp.txt 2>&1; say "attention_sp exit $?"
timeout 120 torchrun --standalone --nproc_per_node=4 -m pytest -q -p no:cacheprovider -m gpu -rfE python/tests > $OUT/w4_pytest.log 2>&1
say "pytest: $(grep -E '[0-9]+ (passed|failed)' $OUT/w4_pytest.log | tail -4 | sort | uniq -c | tr '\n' ' ')"
grep -E "^FAILED" $OUT/w4_pytest.log | sort | uniq | head -10
timeout 60 torchrun --standalone --nproc_per_node=4 -m weft.benchmark --model mixtral-8x7b --mode train --layers 2 --csv $OUT/w4_model_mixtral.csv > $OUT/w4_model_mixtral.txt 2>&1
say "mixtral exit $?"; tail -3 $OUT/w4_model_mixtral.txt
WEFT_TEST_WORLD=4 timeout 100 build-device/tests/gpu/weft_gpu_tests --gtest_filter='*Attention*:Op.TheLastCalls*:Fp8Refusals*:*Moe*:*MoE*' > $OUT/w4_gpu_tests.log 2>&1
say "gpu tests: $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/w4_gpu_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Z]" $OUT/w4_gpu_tests.log | head
