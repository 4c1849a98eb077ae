#!/usr/bin/env python3
"""Replays the tiling rule's stream-K choice on recorded `weft bench gemm` sweeps: for each sweep,
each compute-bound shape above 64 rows, the pick of the whole-tile rule and of "stream-K over
128x256 or 128x192 where its estimate is at most THRESHOLD of the best whole-tile schedule's", both
read off the sweep's own per-variant times (every 128-row tile's /sk is timed where it applies).
It prints, per threshold, how many shapes change and their time before / after (median, min), and
with --detail the changed shapes. With --clusters it prints instead, for each memory-bound shape of
at most 256 rows, the rule's pick without clusters, the rule's pick where they are allowed, and every
128x128 and exchanged 128x112 cluster variant's speed against the first (the data the rule for
clusters is fitted to). The rule's inputs come from weft_core itself
(scripts/tiling_rule_candidates.cpp, built here against BUILD/src/libweft_core.so).

    python3 scripts/tiling_rule_replay.py [--build build] [--detail 0.86] RUN.txt[.gz] [RUN.txt ...]

cuBLASLt's time comes from RUN.csv (or RUN.csv.gz) beside the table where there is one, else from
the table's rounded column."""
import argparse
import csv
import gzip
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep_summary import variants_by_shape  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def unzipped(path):
    """A plain file's path; a .gz one unpacked into a temporary file (variants_by_shape opens paths)."""
    if not path.endswith(".gz"):
        return path
    with gzip.open(path, "rt") as f, tempfile.NamedTemporaryFile("w", suffix="_" + os.path.basename(path)[:-3], delete=False) as g:
        g.write(f.read())
        return g.name


def candidates_tool(build):
    exe = os.path.join(build, "tiling_rule_candidates")
    src = os.path.join(HERE, "tiling_rule_candidates.cpp")
    lib = os.path.join(os.path.abspath(build), "src")
    inputs = [src] + [os.path.join(lib, f) for f in os.listdir(lib) if f.startswith("libweft_core")] if os.path.isdir(lib) else [src]
    if not os.path.exists(exe) or any(os.path.getmtime(exe) < os.path.getmtime(f) for f in inputs):
        subprocess.run(["c++", "-std=c++20", "-O1", "-I", os.path.join(ROOT, "include"), src, "-L", lib, "-lweft_core",
                        f"-Wl,-rpath,{lib}", "-o", exe], check=True)
    return exe


def rule_inputs(exe, shapes):
    out = subprocess.run([exe], input="".join(f"{m} {n} {k}\n" for m, n, k in shapes), capture_output=True, text=True, check=True).stdout
    tiles, picks, clustered = {}, {}, {}
    for line in out.splitlines():
        w = line.split()
        key = (int(w[1]), int(w[2]), int(w[3]))
        if w[0] == "tile":
            tiles.setdefault(key, []).append((w[4], int(w[5]), int(w[6]), float(w[7]), float(w[8]), w[9] == "1"))
        elif w[0] == "pick":
            picks[key] = (w[4], int(w[5]), int(w[6]), w[7] == "1")
        else:
            clustered[key] = variant(w[4], int(w[5]), int(w[6]), w[7] == "1", int(w[8]), int(w[9]), w[10] == "1")
    return tiles, picks, clustered


def variant(tile, splits=1, tail=1, stream_k=False, cluster_m=1, cluster_n=1, exchanged=False):
    """weft bench gemm's name of a variant; tile and clusters are C's (exchanged: named by the kernel's tile, '/x')."""
    if exchanged:
        rows, cols = tile.split("x")
        tile = f"{cols}x{rows}"
    return (f"{tile}x64" + ("/x" if exchanged else "") + (f"/c{cluster_m}x{cluster_n}" if cluster_m * cluster_n > 1 else "")
            + (f"/k{splits}" if splits > 1 else "") + (f"/t{tail}" if tail > 1 else "") + ("/sk" if stream_k else ""))


def whole_tile_pick(cands):
    best = min(cands, key=lambda c: c[3])
    return best, variant(best[0], best[1], best[2])


def stream_k_pick(cands, threshold):
    best, name = whole_tile_pick(cands)
    wide = [c for c in cands if c[0] in ("128x256", "128x192") and c[4] <= threshold * best[3]]
    return variant(min(wide, key=lambda c: c[4])[0], stream_k=True) if wide else name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--thresholds", default="0.80,0.86,0.88,0.90,0.92,0.95")
    ap.add_argument("--detail", type=float, help="list the changed shapes at this threshold")
    ap.add_argument("--clusters", action="store_true", help="the cluster variants against the pick at m <= 256")
    ap.add_argument("runs", nargs="+", help="weft bench gemm tables (RUN.txt or RUN.txt.gz)")
    a = ap.parse_args()
    exe = candidates_tool(a.build)
    for txt in a.runs:
        shapes = variants_by_shape(unzipped(txt))
        lib = {s: v[0] for s, v in shapes.items()}
        stem = txt[: -len(".txt.gz")] if txt.endswith(".txt.gz") else txt[: -len(".txt")] if txt.endswith(".txt") else txt
        for csv_path in (stem + ".csv", stem + ".csv.gz"):
            if os.path.exists(csv_path):
                for r in csv.DictReader(open(unzipped(csv_path))):
                    lib[(int(r["m"]), int(r["n"]), int(r["k"]))] = float(r["library_ms"])
                break
        tiles, picks, clustered_picks = rule_inputs(exe, list(shapes))
        if a.clusters:
            print(os.path.basename(txt))
            gains, untimed = [], []
            for s in sorted(shapes):
                if s[0] > 256 or not tiles[s][0][5]:
                    continue
                times = shapes[s][1]
                pick = variant(*picks[s][:3], stream_k=picks[s][3])
                if pick not in times:
                    continue
                clustered = {v: t for v, t in times.items() if v.startswith("128x128x64/c") or v.startswith("128x112x64/x/c")}
                entries = -(-s[0] // 128) * -(-s[1] // 128)
                rule = clustered_picks[s]
                if rule != pick:
                    if rule in times:
                        gains.append(times[pick] / times[rule])
                    else:
                        untimed.append(rule)
                taken = "" if rule == pick else f"; the rule in clusters {rule} " + (
                    f"{times[pick] / times[rule]:.2f}x faster, {lib[s] / times[rule]:.3f} of cuBLASLt" if rule in times else "(not timed)")
                print(f"  {s[0]}x{s[1]}x{s[2]} ({entries} tiles of 128x128) pick {pick} {lib[s] / times[pick]:.3f} of cuBLASLt{taken}; "
                      + " ".join(f"{v.split('/', 1)[1]} {times[pick] / t:.2f}" for v, t in sorted(clustered.items())))
            if gains:
                print(f"  the rule in clusters changes {len(gains) + len(untimed)} picks: time before / after median {statistics.median(gains):.3f}, "
                      f"min {min(gains):.3f}, max {max(gains):.3f}" + (f"; not timed: {', '.join(untimed)}" if untimed else ""))
            continue
        compute = [s for s in shapes if s[0] > 64 and not tiles[s][0][5]]
        replica = sum(whole_tile_pick(tiles[s])[1] != variant(*picks[s][:3]) for s in compute if not picks[s][3])
        print(f"{os.path.basename(txt)}: {len(compute)} compute-bound shapes above 64 rows; "
              f"the replayed whole-tile rule differs from weft_core's on {replica}")
        for th in [float(x) for x in a.thresholds.split(",")]:
            gains, untimed = [], []
            for s in compute:
                before, after = whole_tile_pick(tiles[s])[1], stream_k_pick(tiles[s], th)
                times = shapes[s][1]
                if after == before:
                    continue
                if before in times and after in times:
                    gains.append((times[before] / times[after], s, before, after))
                else:
                    untimed.append(f"{s[0]}x{s[1]}x{s[2]} ({before if before not in times else after} not timed)")
            g = [x[0] for x in gains]
            print(f"  threshold {th:.2f}: {len(g) + len(untimed)} shapes change" +
                  (f", time before / after median {statistics.median(g):.3f}, min {min(g):.3f}" if g else "") +
                  (f"; {len(untimed)} not judged: " + ", ".join(untimed) if untimed else ""))
            if a.detail is not None and abs(th - a.detail) < 1e-9:
                for ratio, s, before, after in sorted(gains, key=lambda x: x[1]):
                    t = shapes[s][1]
                    print(f"    {s[0]}x{s[1]}x{s[2]}: {before} -> {after} {ratio:.3f} "
                          f"(cuBLASLt {lib[s] / t[before]:.3f} -> {lib[s] / t[after]:.3f})")


if __name__ == "__main__":
    main()
