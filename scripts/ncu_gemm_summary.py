#!/usr/bin/env python3
"""Per GEMM kernel and grid, the medians over launches of what Nsight Compute measured: time, the
bytes L2 handled and read for the SMs, what the SMs took in (multicast: one L2 read, several SMs),
DRAM reads and the tensor pipe's activity. Names the overlap GEMM's kernels by tile, cluster and
one-tile-per-CTA (/1) from their template arguments; cuBLASLt's by its own name.

    ncu --clock-control none --csv --kernel-name-base demangled \\
        --metrics gpu__time_duration.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum,dram__bytes_read.sum,launch__grid_size,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \\
        -k 'regex:OverlapGemmKernel|nvjet' weft bench gemm --gemm 200x7168x4096 --iterations 1 --warmup 0 > run.csv
    python3 scripts/ncu_gemm_summary.py run.csv"""

import collections
import csv
import re
import statistics
import sys

KERNEL = re.compile(r"OverlapGemmKernel<(?:\(int\))?(\d+), (?:\(int\))?(\d+), (?:\(int\))?(\d+), (?:\(bool\))?(\w+), (?:\(bool\))?(\w+), "
                    r"(?:\(int\))?(\d), (?:\(int\))?(\d), ([\w:]+)(?:, (?:\(bool\))?(\w+))?>")


def name_of(kernel):
    m = KERNEL.search(kernel)
    if not m:
        return kernel.split("(")[0][:48]
    tm, tn, tk, n_major, transposed, cm, cn, element, one_tile = m.groups()
    name = f"{tm}x{tn}x{tk}" + ("/n-major" if n_major in ("1", "true") else "") + ("/x" if transposed in ("1", "true") else "")
    name += f"/c{cm}x{cn}" if (cm, cn) != ("1", "1") else ""
    name += "/fp8" if "e4m3" in element else ""
    return name + ("/1" if one_tile in ("1", "true") else "")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        with open(path) as f:
            rows = list(csv.DictReader(line for line in f if line.startswith('"')))
        launches = collections.defaultdict(dict)
        for r in rows:
            launches[r["ID"]][r["Metric Name"]] = r["Metric Value"].replace(",", "")
            launches[r["ID"]]["name"] = r["Kernel Name"]
        groups = collections.defaultdict(list)
        for d in launches.values():
            value = lambda key: float(d.get(key, "nan"))
            groups[(name_of(d["name"]), d.get("launch__grid_size", "?"))].append(
                (value("gpu__time_duration.sum") / 1e3, value("lts__t_bytes.sum") / 1e6, value("lts__t_sectors_srcunit_tex_op_read.sum") * 32 / 1e6,
                 value("l1tex__m_xbar2l1tex_read_bytes.sum") / 1e6, value("dram__bytes_read.sum") / 1e6,
                 value("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")))
        print(f"== {path}\nkernel                                        grid  n   time us   L2 MB  L2 read MB  SMs in MB  DRAM MB  tensor %")
        for (name, grid), values in sorted(groups.items(), key=lambda kv: (kv[0][0], int(kv[0][1]) if kv[0][1].isdigit() else 0)):
            med = [statistics.median(v[i] for v in values) for i in range(6)]
            print(f"{name:44s} {grid:>5s} {len(values):2d} {med[0]:9.1f} {med[1]:7.0f} {med[2]:11.0f} {med[3]:10.0f} {med[4]:8.0f} {med[5]:9.1f}")


if __name__ == "__main__":
    main()
