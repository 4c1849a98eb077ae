#!/usr/bin/env bash
# A/B on the GPU machine: the working tree's `weft` against a base revision's, built side by side,
# the same `weft` command run for each in turn, ROUNDS times interleaved, so that a change is judged
# against its base on the same machine and minutes. Usage (through the device tool, carrying .deps;
# with the base as a tarball where the device's .git may lag: git archive -o .devjob/base.tgz REV,
# carried too):
#   BASE=HEAD~1 WORLD=4 ROUNDS=2 bash scripts/ab_bench.sh bench --world 4 --suite tilelink_mlp --strategy tilelink
#   BASE_TGZ=.devjob/base.tgz WORLD=1 bash scripts/ab_bench.sh bench gemm --gemm 200x7168x4096
# WORLD > 1: each run under torchrun, one process per GPU (as users run weft). Writes base_R.txt and
# new_R.txt per round under $OUT and a progress line per run (the rows that end in ok/MISMATCH).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset CC CXX CUDAHOSTCXX
[ $# -gt 0 ] || { sed -n 2,11p "$0"; exit 2; }
out=${OUT:-out}; mkdir -p "$out"
say() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/progress"; }
root=$PWD base=/tmp/weft_ab_base
rm -rf "$base" && mkdir -p "$base"
if [ -n "${BASE_TGZ:-}" ]; then tar -xzf "$BASE_TGZ" -C "$base" || { say "cannot unpack $BASE_TGZ"; exit 1; }
else git archive "${BASE:-HEAD}" | tar -x -C "$base" || { say "git archive ${BASE:-HEAD} failed (the device's .git may lag: use BASE_TGZ)"; exit 1; }
fi
ln -sfn "$root/.deps" "$base/.deps"
for tree in "$root" "$base"; do
  ( cd "$tree" && cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF -DWEFT_PYTHON=OFF > "$out/configure_$(basename "$tree").log" 2>&1 &&
    timeout 900 cmake --build build-ab --target weft > "$out/build_$(basename "$tree").log" 2>&1 ) ||
    { say "build failed in $tree"; grep -E "error" -A3 "$out/build_$(basename "$tree").log" | head -20 >> "$out/progress"; exit 1; }
done
say "built new (working tree) and base (${BASE_TGZ:-${BASE:-HEAD}})"
world=${WORLD:-1}
launcher=""
[ "$world" -gt 1 ] && launcher="env CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((world - 1))) torchrun --standalone --nproc_per_node=$world --no-python"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for variant in base new; do
    bin="$root/build-ab/weft"; [ $variant = base ] && bin="$base/build-ab/weft"
    log="$out/${variant}_$round.txt"
    timeout "${RUN_LIMIT_S:-300}" $launcher "$bin" "$@" > "$log" 2>&1
    say "$variant round $round exit $?"
    grep -E " (ok|MISMATCH)$" "$log" >> "$out/progress"
  done
done
say "done"
