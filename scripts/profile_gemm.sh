#!/usr/bin/env bash
# Nsight Compute over `weft bench gemm` on a few shapes: which kernel cuBLASLt's heuristic runs (its
# name says tile, stages, cluster and schedule), and the same counters for the overlap GEMM, so the
# two are compared by more than time (scripts/ncu_gemm_summary.py: per kernel and grid, time, L2 bytes
# and reads, the SMs' intake, DRAM, tensor activity, cluster, registers, shared memory). Used through
# the device tool after a build by gpu_check.sh:
#   bash scripts/profile_gemm.sh [MxNxK,...]
# Hardware counters need the Firecracker runtime (device/KINDS.md); clocks are left alone.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shapes=${1:-4096x4096x2048,8192x4096x2752,8192x7168x8192}
out=${OUT:-out}; mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
for shape in ${shapes//,/ }; do
  timeout -s KILL 240 "$ncu" --clock-control none --section SpeedOfLight --section LaunchStats --metrics "$(python3 scripts/ncu_gemm_summary.py --metrics)" \
    --csv --page raw -k regex:"nvjet|gemm|xmma|cutlass" --launch-count 40 \
    ./build-device/weft bench gemm --gemm "$shape" --iterations 1 --warmup 0 > "$out/ncu_$shape.csv" 2> "$out/ncu_$shape.err"
  echo "== $shape (exit $?)"
  python3 scripts/ncu_gemm_summary.py "$out/ncu_$shape.csv"
  tail -3 "$out/ncu_$shape.err"
done
