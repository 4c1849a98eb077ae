#!/usr/bin/env python3
"""Reads a `weft bench gemm` run (its printed table and its --csv) and says what its summary lines
do not: stream-K against the same tile's whole-tile schedule, the best whole-tile schedule per shape
and the best of every variant against cuBLASLt, and the rule's worst shapes.

    python3 scripts/gemm_sweep_summary.py RUN.txt RUN.csv
"""
import csv
import re
import statistics
import sys


def variants_by_shape(text_path):
    """{(m, n, k): (library ms, {variant: ms})} from the table's rows and their 'each tile' lines."""
    shapes, current = {}, None
    for line in open(text_path):
        row = re.search(r"\s(\d+)\s+(\d+)\s+(\d+)\s+(\d+\.\d+)\s", line)  # after the row's name
        if row and not line.startswith(" "):
            current = (int(row.group(1)), int(row.group(2)), int(row.group(3))), float(row.group(4))
        elif "each tile and split, ms:" in line and current and current[0] not in shapes:
            words = line.split("ms:", 1)[1].split()
            shapes[current[0]] = (current[1], {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)})
    return shapes


def main(text_path, csv_path):
    shapes = variants_by_shape(text_path)
    if not shapes:
        sys.exit(f"{text_path}: no 'each tile and split' lines (a weft bench gemm table?)")
    streamed, whole_best, any_best = [], [], []
    for library_ms, variants in shapes.values():
        for name, ms in variants.items():
            if name.endswith("/sk"):  # against the same tile unsplit or split in its tail
                base = [t for v, t in variants.items() if v == name[:-3] or v.startswith(name[:-3] + "/t")]
                if base:
                    streamed.append(min(base) / ms)
        whole_best.append(library_ms / min(t for v, t in variants.items() if not v.endswith("/sk")))
        any_best.append(library_ms / min(variants.values()))
    chosen = []
    for r in csv.DictReader(open(csv_path)):
        chosen.append((float(r["library_ms"]) / float(r["chosen_ms"]), (int(r["m"]), int(r["n"]), int(r["k"])), r["chosen"]))
    chosen = list({shape: (ratio, shape, name) for ratio, shape, name in chosen}.values())
    print(f"shapes {len(shapes)}")
    if streamed:
        print(f"stream-K against the same tile's whole-tile schedule ({len(streamed)} pairs; time ratio, > 1: stream-K faster): "
              f"median {statistics.median(streamed):.3f}, min {min(streamed):.3f}, max {max(streamed):.3f}; "
              f"faster by > 3%: {sum(x > 1.03 for x in streamed)}, slower by > 3%: {sum(x < 0.97 for x in streamed)}")
    for label, ratios in (("best whole-tile schedule per shape", whole_best), ("best of every variant per shape", any_best),
                          ("the rule's pick", [c[0] for c in chosen])):
        print(f"{label} / cuBLASLt: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
              f"under 0.95: {sum(x < 0.95 for x in ratios)} of {len(ratios)}")
    print("the rule's worst shapes (m, n, k) and picks:")
    for ratio, shape, name in sorted(chosen)[:12]:
        print(f"  {ratio:.3f} {shape} {name}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
