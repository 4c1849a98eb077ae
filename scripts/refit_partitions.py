#!/usr/bin/env python3
"""Replays signal's wave-partition predictor (src/core/plan_signal_groups.cpp) on the CSV and log of
`weft tune --partitions` runs, and searches the per-collective cost (overlapped_call_seconds) and the
slowdown of a collective beside the GEMM (a curve's overlapped_slowdown) that predict the measured
times best. The replay assumes every wave stores the same number of bytes (full tiles), so its
errors differ from the tool's by a few tenths of a percent.

usage: scripts/refit_partitions.py PROFILE.json KIND=STEM [KIND=STEM ...]
  KIND: all_reduce | reduce_scatter | all_to_all; STEM: bench/results/<stem>.{csv,txt} of one study
  (world 2; shapes are read from the suites under bench/).
"""
import collections
import csv
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def suite_shapes():
    shapes = {}
    for name in os.listdir(os.path.join(ROOT, 'bench')):
        if name.endswith('.json'):
            for row in json.load(open(os.path.join(ROOT, 'bench', name))).get('rows', []):
                shapes[row['name']] = row
    return shapes


def per_rank(row, world):
    m, n, k = row['m'], row['n'], row['k']
    if row.get('split', 'tensor') == 'none':
        return m, n, k
    if row['op'] in ('gemm_rs', 'gemm_ar'):
        return m, n, k // world
    if row['op'] == 'gemm_a2a':
        return m // world, n, k
    return m // world, n // world, k


def main():
    profile = json.load(open(sys.argv[1]))
    curves = {(c['kind'], c['world_size']): (c['bytes'], c['seconds']) for c in profile['collectives']}
    bandwidth = profile['memory_bytes_per_s']
    shapes = suite_shapes()

    def curve(kind, b):
        xs, ys = curves[(kind, 2)]
        if b <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if b <= xs[i]:
                return ys[i - 1] + (ys[i] - ys[i - 1]) * (b - xs[i - 1]) / (xs[i] - xs[i - 1])
        return ys[-1] + (ys[-1] - ys[-2]) * (b - xs[-1]) / (xs[-1] - xs[-2])

    data = []
    for arg in sys.argv[2:]:
        kind, stem = arg.split('=')
        log = open(os.path.join(ROOT, 'bench/results', stem + '.txt')).read()
        alone = {m.group(1): (int(m.group(2)), float(m.group(3)) * 1e-3)
                 for m in re.finditer(r'world 2, (.+?): (\d+) waves, GEMM alone ([\d.]+) ms', log)}
        for r in csv.DictReader(open(os.path.join(ROOT, 'bench/results', stem + '.csv'))):
            waves, gemm = alone[r['row']]
            m, n, k = per_rank(shapes[r['row']], 2)
            parts = [int(x) for x in r['partition'].split(',')]
            data.append((kind, r['row'], m, n, k, waves, gemm, parts, float(r['measured_ms']) * 1e-3))

    def predict(d, call, slowdown):
        kind, _, m, n, k, waves, gemm, parts, _ = d
        total = m * n * 2.0
        compute = comm = 0.0
        for size in parts:
            compute += size * gemm / waves
            comm = max(comm, compute) + call + slowdown * curve(kind, total * size / waves)
        prologue = 2.0 * m * k * 2 / bandwidth if kind == 'all_to_all' else 0.0
        return prologue + max(comm, compute) + 2.0 * total / bandwidth

    def error(rows, call, slowdown):
        return sum(abs(predict(d, call, slowdown) - d[-1]) / d[-1] for d in rows) / len(rows)

    by_kind = collections.defaultdict(list)
    for d in data:
        by_kind[d[0]].append(d)
    for kind, rows in by_kind.items():
        best = min((error(rows, c * 1e-6, 1 + 0.05 * s), c, 1 + 0.05 * s) for c in range(0, 41, 2) for s in range(0, 31))
        print(f'{kind}: {len(rows)} measurements; profile as given: MAE {100 * error(rows, profile["overlapped_call_seconds"], 1):.1f}%'
              f' (slowdown 1); best: overlapped_call_seconds {best[1]} us, overlapped_slowdown {best[2]:.2f}, MAE {100 * best[0]:.1f}%')


if __name__ == '__main__':
    main()
