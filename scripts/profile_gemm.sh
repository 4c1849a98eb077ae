#!/usr/bin/env bash
# Nsight Compute over `weft bench gemm` on a few shapes: which kernel cuBLASLt's heuristic runs (its
# name says tile, stages, cluster and schedule), and the same counters for the overlap GEMM, so the
# two are compared by more than time. Used through the device tool after a build by gpu_check.sh:
#   bash scripts/profile_gemm.sh [MxNxK,...]
# Hardware counters need the Firecracker runtime (device/KINDS.md); clocks are left alone.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shapes=${1:-4096x4096x2048,8192x4096x2752,8192x7168x8192}
out=${OUT:-out}; mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
# The sections every ncu has, plus the tensor pipe and L2 bytes where this ncu knows those metrics.
extra=lts__t_bytes.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
"$ncu" --query-metrics --chip gh100 2>/dev/null | grep -q sm__pipe_tensor_op_gmma_cycles_active || extra=lts__t_bytes.sum
for shape in ${shapes//,/ }; do
  timeout -s KILL 240 "$ncu" --clock-control none --section SpeedOfLight --section LaunchStats --metrics "$extra" --csv --page raw -k regex:"nvjet|gemm|xmma|cutlass" --launch-count 40 \
    ./build-device/weft bench gemm --gemm "$shape" --iterations 1 --warmup 0 > "$out/ncu_$shape.csv" 2> "$out/ncu_$shape.err"
  echo "== $shape (exit $?)"
  python3 - "$out/ncu_$shape.csv" <<'PY'
import csv, sys, re
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
if len(rows) < 3: sys.exit("no ncu rows")
head, units, rows = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}
def g(r, *names):
    for n in names:
        if n in col: return r[col[n]] + ("" if units[col[n]] in ("", "%") else units[col[n]])
    return "?"
seen = set()
for r in rows:
    name = re.sub(r"weft::overlap_gemm_detail::", "", r[col["Kernel Name"]])[:80]
    key = (name, r[col.get("launch__grid_size", 0)])
    if key in seen: continue
    seen.add(key)
    print(f"{name:80s} grid {g(r, 'launch__grid_size')} cluster {g(r, 'launch__cluster_dim_x')}x{g(r, 'launch__cluster_dim_y')} "
          f"smem {g(r, 'launch__shared_mem_per_block_dynamic')} regs {g(r, 'launch__registers_per_thread')} "
          f"time {g(r, 'gpu__time_duration.sum')} sm% {g(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed')} "
          f"gmma% {g(r, 'sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active')} "
          f"L2 {g(r, 'lts__t_bytes.sum')} dram {g(r, 'dram__bytes_read.sum', 'dram__bytes.sum')} mem% {g(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed')}")
PY
  tail -3 "$out/ncu_$shape.err"
done
