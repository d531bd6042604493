#!/usr/bin/env python3
"""Tables from bench/fp4_exact_vs_int8.sh output (JSON lines on stdin or files).

For every (op, routing, format, backend, batch): the best ratio over the
rounds (ratio = weight GB/s / paired-probe GB/s, median over a run's calls)
with that run's load, and for --resident runs the best GB/s per core."""
import json
import sys
from collections import defaultdict

rows = []
for path in sys.argv[1:] or ['-']:
    f = sys.stdin if path == '-' else open(path)
    for line in f:
        line = line.strip()
        if line.startswith('{'):
            rows.append(json.loads(line))

def kind(r):
    d = r.get('detail', '')
    if 'resident' in d:
        return 'resident'
    clock = ' (1 thread, CPU clock)' if 'thread CPU time' in d else ''
    if r['op'] == 'moe':
        return 'moe ' + ('shared' if 'routing shared' in d else 'random') + clock
    return 'linear ' + d.split(',')[0] + clock

best = defaultdict(lambda: None)
for r in rows:
    key = (kind(r), r['format'], r['backend'], r['batch'])
    val = r['gbps'] if kind(r) == 'resident' else r['ratio']
    if best[key] is None or val > best[key][0]:
        best[key] = (val, r.get('load'), r['time_ms_median'], r.get('bandwidth_gbps'))

kinds = sorted({k[0] for k in best})
for k in kinds:
    print(f'\n## {k}' + (' (GB/s per core: per-run median, best run)' if k == 'resident' else ' (ratio; median time ms; load; probe GB/s)'))
    batches = sorted({key[3] for key in best if key[0] == k})
    print('| format | backend | ' + ' | '.join(f'batch {b}' for b in batches) + ' |')
    print('|---|---|' + '---|' * len(batches))
    for fmt in sorted({key[1] for key in best if key[0] == k}):
        for be in sorted({key[2] for key in best if key[0] == k and key[1] == fmt}):
            cells = []
            for b in batches:
                v = best[(k, fmt, be, b)]
                if v is None:
                    cells.append('-')
                elif k == 'resident':
                    cells.append(f'{v[0]:.1f}')
                else:
                    cells.append(f'{v[0]:.2f} ({v[2]:.2f} ms; load {v[1]}; {v[3]:.0f})')
            print(f'| {fmt} | {be} | ' + ' | '.join(cells) + ' |')
