#!/usr/bin/env python3
"""Medians of bench/batchinv_ab.sh output: GB/s per (backend, format, batch)
for A and B, and B/A."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for path in sys.argv[1:] or ['-']:
    f = sys.stdin if path == '-' else open(path)
    for line in f:
        tag, _, js = line.strip().partition(' ')
        if tag not in ('A', 'B') or not js.startswith('{'):
            continue
        r = json.loads(js)
        runs[(r['backend'], r['format'], r['batch'], tag)].append(r['gbps'])

keys = sorted({k[:3] for k in runs})
print('| backend | format | batch | A GB/s | B GB/s | B/A | runs |')
print('|---|---|---|---|---|---|---|')
for be, fmt, batch in keys:
    a = runs.get((be, fmt, batch, 'A'), [])
    b = runs.get((be, fmt, batch, 'B'), [])
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    print(f'| {be} | {fmt} | {batch} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} | {len(a)}/{len(b)} |')
