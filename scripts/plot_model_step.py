#!/usr/bin/env python3
"""Draws `python -m weft.benchmark --model NAME --csv FILE` output as a PNG bar chart: per model step
(one CSV per model and mode), tokens/s of each variant (weft, plain torch, AsyncTP), with each bar's
speedup over plain torch written on it.  Usage: plot_model_step.py PNG CSV [CSV...]   (needs matplotlib)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(png_path, csv_paths):
    groups = []  # (label, [(variant, tokens/s, speedup)])
    for path in csv_paths:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"{path}: no rows")
        label = f"{rows[0]['row']}\n{rows[0]['op']}, W={rows[0]['world']}"
        groups.append((label, [(r["variant"].split()[0], float(r["m"]) / float(r["ms"]) * 1e3, float(r["speedup"])) for r in rows]))
    variants = sorted({v for _, bars in groups for v, _, _ in bars}, key=lambda v: ["weft", "torch", "async_tp"].index(v) if v in ("weft", "torch", "async_tp") else 9)
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(groups)), 4.5))
    for i, variant in enumerate(variants):
        for j, (_, bars) in enumerate(groups):
            for v, tokens_per_s, speedup in bars:
                if v != variant:
                    continue
                x = j + (i - len(variants) / 2 + 0.5) * width
                ax.bar(x, tokens_per_s / 1e3, width, color=f"C{i}", label=variant if j == 0 or variant not in ax.get_legend_handles_labels()[1] else None)
                ax.text(x, tokens_per_s / 1e3, f"{speedup:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), [label for label, _ in groups], fontsize=8)
    ax.set_ylabel("thousand tokens / s")
    ax.set_title("Model step: weft against plain torch (speedup over plain torch on each bar)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
