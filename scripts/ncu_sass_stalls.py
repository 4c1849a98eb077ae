#!/usr/bin/env python3
"""Where a kernel's warps stall, per SASS instruction, from Nsight Compute's source page:

    ncu --set full -o REPORT -k regex:NAME ...            (on the GPU machine)
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
    python3 scripts/ncu_sass_stalls.py SASS.csv[.gz] [--top 40] [--listing OUT.txt]

Prints the warp-sampling totals by stall reason, the instructions with the most samples (offset in
the function, samples, executions, SASS, their two largest reasons), the samples of the retry loops
that the compiler places after the function's last EXIT (mbarrier waits that did not pass at once),
and with --listing every instruction in order, for reading a loop's samples in place."""

import argparse
import csv
import gzip
import io
import sys


def read(path):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path, newline="")
    rows = list(csv.reader(io.StringIO(raw.read())))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    return rows[header_at], rows[header_at + 1:]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--listing")
    args = parser.parse_args()
    header, data = read(args.csv)
    col = {h: i for i, h in enumerate(header)}
    for needed in ("Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if needed not in col:
            sys.exit(f"{args.csv}: no '{needed}' column (export with --page source --csv --print-source sass)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][col["Address"]], 16)

    def samples(r):
        return number(r[col["Warp Stall Sampling (All Samples)"]])

    def line(r):
        top = sorted(((number(r[col[s]]), s) for s in reasons), reverse=True)[:2]
        why = ", ".join(f"{s[6:]}={v:.0f}" for v, s in top if v > 0)
        return (f"{int(r[col['Address']], 16) - base:06x} {samples(r):8.0f} {number(r[col['Instructions Executed']]):11.0f}  "
                f"{r[col['Source']].strip()[:64]:64s} | {why}")

    total = sum(samples(r) for r in data)
    print(f"{len(data)} instructions, {total:.0f} warp samples")
    for s in sorted(reasons, key=lambda s: -sum(number(r[col[s]]) for r in data))[:10]:
        v = sum(number(r[col[s]]) for r in data)
        print(f"  {s[6:]:20s} {v:9.0f}  {v / total:6.1%}")
    last_exit = max((i for i, r in enumerate(data) if "EXIT" in r[col["Source"]]), default=len(data))
    tail = sum(samples(r) for r in data[last_exit + 1:])
    print(f"after the last EXIT (the waits' retry loops): {tail:.0f} samples, {tail / total:.1%}")
    print(f"\nthe {args.top} instructions with the most samples (offset, samples, executed, SASS | reasons):")
    for r in sorted(data, key=samples, reverse=True)[:args.top]:
        print("  " + line(r))
    if args.listing:
        with open(args.listing, "w") as out:
            for r in data:
                out.write(line(r) + "\n")


if __name__ == "__main__":
    main()
