#!/usr/bin/env python3
"""Per GEMM kernel and grid, the medians over launches of what Nsight Compute measured: time, the
bytes L2 handled and read for the SMs, what the SMs took in (multicast: one L2 read, several SMs),
DRAM reads and the tensor pipe's activity, with the launch's cluster, registers and shared memory
where the CSV has them. Names the overlap GEMM's kernels by tile, cluster and one-tile-per-CTA (/1)
from their template arguments; cuBLASLt's by its own name (tile, stages, cluster). Reads ncu's CSV
with one row per metric (`--csv`) or one row per launch (`--csv --page raw`, as scripts/profile_gemm.sh
writes it), gzipped or not.

    ncu --clock-control none --csv --kernel-name-base demangled --metrics $(python3 scripts/ncu_gemm_summary.py --metrics) \\
        -k 'regex:OverlapGemmKernel|nvjet' weft bench gemm --gemm 200x7168x4096 --iterations 1 --warmup 0 > run.csv
    python3 scripts/ncu_gemm_summary.py run.csv
"""

import collections
import csv
import gzip
import re
import statistics
import sys

METRICS = ("gpu__time_duration.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum,"
           "dram__bytes_read.sum,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread,"
           "launch__shared_mem_per_block_dynamic,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")

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


def launches_of(path):
    """{launch id: {metric: value, "name": kernel}} from either CSV layout, values without thousands commas."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        return {}
    head = rows[0]
    launches = collections.defaultdict(dict)
    if "Metric Name" in head:  # one row per metric
        col = {h: i for i, h in enumerate(head)}
        for r in rows[1:]:
            launches[r[col["ID"]]][r[col["Metric Name"]]] = r[col["Metric Value"]].replace(",", "")
            launches[r[col["ID"]]]["name"] = r[col["Kernel Name"]]
    else:  # --page raw: a units row, then one row per launch
        for n, r in enumerate(rows[2:]):
            launches[str(n)] = {h: v if h == "Kernel Name" else v.replace(",", "") for h, v in zip(head, r)}
            launches[str(n)]["name"] = launches[str(n)].get("Kernel Name", "?")
    return launches


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--metrics":  # what to ask ncu for
        print(METRICS)
        return
    for path in sys.argv[1:]:
        groups = collections.defaultdict(list)
        shape = {}
        for d in launches_of(path).values():
            def value(key):
                try:
                    return float(d.get(key, "nan"))
                except ValueError:
                    return float("nan")
            key = (name_of(d["name"]), d.get("launch__grid_size", "?"))
            shape[key] = (f"{d.get('launch__cluster_dim_x', '?')}x{d.get('launch__cluster_dim_y', '?')}", d.get("launch__registers_per_thread", "?"),
                          d.get("launch__shared_mem_per_block_dynamic", "?"))
            groups[key].append((value("gpu__time_duration.sum") / 1e3, value("lts__t_bytes.sum") / 1e6,
                                value("lts__t_sectors_srcunit_tex_op_read.sum") * 32 / 1e6, value("l1tex__m_xbar2l1tex_read_bytes.sum") / 1e6,
                                value("dram__bytes_read.sum") / 1e6, value("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")))
        print(f"== {path}\nkernel                                        grid  n   time us   L2 MB  L2 read MB  SMs in MB  DRAM MB  tensor %  cluster regs smem")
        for key, values in sorted(groups.items(), key=lambda kv: (kv[0][0], int(kv[0][1]) if kv[0][1].isdigit() else 0)):
            med = [statistics.median(v[i] for v in values) for i in range(6)]
            print(f"{key[0]:44s} {key[1]:>5s} {len(values):2d} {med[0]:9.1f} {med[1]:7.0f} {med[2]:11.0f} {med[3]:10.0f} {med[4]:8.0f} {med[5]:9.1f}"
                  f"  {shape[key][0]:>7s} {shape[key][1]:>4s} {shape[key][2]}")


if __name__ == "__main__":
    main()
