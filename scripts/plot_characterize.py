#!/usr/bin/env python3
"""Draws `weft characterize --csv` output as a PNG: per row, the decomposition losses (GEMM cut
1/W and 1/W^2 ways by rows and by K) and the contention losses (GEMM with copy-engine or NCCL
all-gather), in percent.  Usage: plot_characterize.py CSV PNG   (needs matplotlib)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("dil_rows_w", "DIL rows 1/W"), ("dil_rows_w2", "DIL rows 1/W²"), ("dil_k_w", "DIL K 1/W"),
          ("dil_k_w2", "DIL K 1/W²"), ("cil_copies", "CIL copy engine"), ("cil_nccl", "CIL NCCL")]


def main(csv_path, png_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{csv_path}: no rows")
    labels = [f"{r['row']}\nW={r['world']}" for r in rows]
    width = 0.8 / len(SERIES)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4.5))
    for i, (key, name) in enumerate(SERIES):
        xs = [j + (i - len(SERIES) / 2 + 0.5) * width for j in range(len(rows))]
        ax.bar(xs, [100 * float(r[key]) for r in rows], width, label=name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("loss vs. undivided / alone (%)")
    ax.set_title("FiCCO characterisation: decomposition (DIL) and contention (CIL) losses")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
