#!/usr/bin/env python3
"""Table of a side-by-side run against ggml (bench/results/*_ops_vs_ggml_*.jsonl).

    python3 bench/summarize_sbs.py bench/results/0104_ops_vs_ggml_zen5_avx512.jsonl

Each line of the .jsonl is one measurement with a "tag": N<round> nibble's
default backend and I<round> its int8 backend (`nibble bench linear|moe
--json` lines), G<round> ggml (the throwaway harness's lines: op, type,
tokens, buft, ms_median, ms_min, bytes; weight_bytes before 2026-12-08).
Per (op, format, tokens): the median over rounds of each run's median ms,
GB/s of weights, rT = ggml ms / nibble ms (> 1: nibble faster), rTbest from
the best calls, nibble's paired probe (median) and its default GB/s over
that probe. ggml's Q8_0 rows pair with nibble's fp8_block128. Reproduces
the tables of 2153_ops_vs_ggml_spr_avx512.txt, 0104_... and 0148_...
Standard library only.
"""
import json
import statistics as st
import sys
from collections import defaultdict


def main(path):
    fmt = {'q8_0': 'fp8_block128'}
    nib, i8, gg = defaultdict(list), defaultdict(list), defaultdict(list)
    probe, nib_best, gg_best = defaultdict(list), defaultdict(list), defaultdict(list)
    nbytes, gbytes, buft = {}, {}, {}
    for line in open(path):
        j = json.loads(line)
        kind = j['tag'][0]
        if kind in 'NI':
            k = ('gemv' if j['op'] == 'linear' else 'moe', j['format'], j['batch'])
            (nib if kind == 'N' else i8)[k].append(j['time_ms_median'])
            if kind == 'N':
                probe[k].append(j['bandwidth_gbps'])
                nib_best[k].append(j['time_ms_min'])
                nbytes[k] = j['bytes']
        else:
            k = (j['op'], fmt.get(j['type'], j['type']), j['tokens'])
            gg[k].append(j['ms_median'])
            gg_best[k].append(j['ms_min'])
            gbytes[k] = j['bytes'] if 'bytes' in j else j['weight_bytes']
            buft[k] = j['buft']
    print('op    format        tok |  ggml ms   GB/s buft         | default ms   GB/s    rT rTbest |'
          '  int8 ms   GB/s    rT | probe def/probe  n')
    for k in sorted(nib):
        if k not in gg:
            continue
        g, n, mb = st.median(gg[k]), st.median(nib[k]), nbytes[k] / 1e6
        if i8.get(k):
            i = st.median(i8[k])
            int8 = f'{i:8.2f} {mb / i:6.2f} {g / i:5.2f}'
        else:
            int8 = '       -      -     -'
        p = st.median(probe[k])
        print(f'{k[0]:5} {k[1]:13} {k[2]:3} | {g:8.2f} {gbytes[k] / 1e6 / g:6.2f} {buft[k]:12} | '
              f'{n:10.2f} {mb / n:6.2f} {g / n:5.2f}  {min(gg_best[k]) / min(nib_best[k]):5.2f} | {int8} | '
              f'{p:5.1f}     {mb / n / p:4.2f}  {len(nib[k])}/{len(gg[k])}')


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit('usage: summarize_sbs.py RESULTS.jsonl')
    main(sys.argv[1])
