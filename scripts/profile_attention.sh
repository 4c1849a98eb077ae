#!/usr/bin/env bash
# Nsight Compute over weft's attention kernel and over the kernel the installed PyTorch's SDPA runs
# (cuDNN's, and flash's), on the same problem, with where their warps stall: the per-reason stall
# ratios and the SASS lines that stall most (SourceCounters). Used through the device tool after a
# build by gpu_check.sh (the weft tool in build-device):
#   bash scripts/profile_attention.sh [TOKENSxHEADSxKV_HEADSxHEAD_DIM ...]   (default 16384x32x8x128)
# Hardware counters need the Firecracker runtime (device/KINDS.md); clocks are left alone.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shapes=${*:-16384x32x8x128}
out=${OUT:-out}; mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters"
metrics="--metrics smsp__inst_executed.sum,lts__t_bytes.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for shape in $shapes; do
  IFS=x read -r tokens heads kv_heads d <<< "$shape"
  timeout -s KILL 180 "$ncu" --clock-control none $sections $metrics -k regex:attention --launch-count 1 \
    ./build-device/weft bench attention --attention "$shape" --iterations 1 --warmup 0 > "$out/ncu_attention_weft_$shape.txt" 2>&1
  echo "== weft $shape (exit $?)"
  for backend in cudnn flash; do
    timeout -s KILL 180 "$ncu" --clock-control none $sections $metrics -k regex:"cudnn|flash|fmha" --launch-skip 2 --launch-count 1 \
      python3 - "$backend" "$tokens" "$heads" "$d" > "$out/ncu_attention_sdpa_${backend}_$shape.txt" 2>&1 <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
backend, tokens, heads, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# K and V with the query heads' count: SDPA's fastest path, and the same FLOPs as the GQA problem.
q, k, v = (torch.randn(1, heads, tokens, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
    echo "== sdpa $backend $shape (exit $?)"
  done
  for f in "$out"/ncu_attention_*_"$shape".txt; do
    echo "-- $(basename "$f")"
    grep -E "^  [a-zA-Z_].*\(|Duration|Issue Slots Busy|smsp__inst_executed.sum|lts__t_bytes.sum" "$f" | head -6
    # The five largest stall reasons (warps per issued instruction).
    grep -E "smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" "$f" | awk '{print $NF, $1}' | sort -rn | head -5
  done
done
