#!/bin/sh
# Whole-model decode speed against the bandwidth bound (performance.md:
# tokens/s <= read bandwidth / weight bytes read per token).
#
#   bench/decode_bound.sh [MODEL_DIR] [options]        (default: models/dsv4-tiny)
#     -n N        tokens to generate per run (default 64; the first comes from the
#                 prompt's forward, so N - 1 decode steps are timed)
#     -r R        runs (default 5); the median decode tokens/s is reported
#     --build DIR build folder with the nibble binary (default build/release)
#     anything else is passed to `nibble run` (e.g. --threads 2, --moe-backend X)
#
# Each run: `nibble run MODEL -p PROMPT -n N --temp 1 --seed <run>` (sampling
# at temperature 1, different seed per run, so hash-routed layers see varied
# tokens and route to varied experts instead of a greedy loop's few; the
# weights then come from DRAM, not cache). bytes_per_token comes from
# `nibble explain --json` (every weight one decoded token reads: attention,
# shared + top-k routed experts at their stored size, router, hc, head, one
# embedding row). Read bandwidth is `nibble bench bandwidth` (best pass over a
# 2 GiB cold buffer, all threads) measured right before and right after the
# runs; bound = bandwidth / bytes_per_token, ratio = median tok/s / bound
# (for both bandwidths). The load average is printed with the numbers: the
# machine is shared, and bandwidth under load drops several-fold.
#
# Output: one human line per run, then one JSON object (last line).
set -e
MODEL=models/dsv4-tiny
case "$1" in -*|"") ;; *) MODEL=$1; shift ;; esac
N=64
R=5
BUILD=build/release
EXTRA=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    *) EXTRA="$EXTRA $1"; shift ;;
  esac
done
NIBBLE="$BUILD/nibble"
[ -x "$NIBBLE" ] || { echo "decode_bound.sh: no nibble binary at $NIBBLE (build it, or pass --build DIR)" >&2; exit 2; }
[ -d "$MODEL" ] || { echo "decode_bound.sh: no model folder $MODEL" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

PROMPT="Friends, Romans, countrymen, lend me your ears;"
load() { cut -d' ' -f1-3 /proc/loadavg; }

LOAD_BEFORE=$(load)
# The probe uses the same threads as the runs.
THREADS_FLAG=$(echo "$EXTRA" | grep -o -- '--threads [0-9]*' || true)
# shellcheck disable=SC2086
"$NIBBLE" bench bandwidth --json $THREADS_FLAG > "$TMP/bw_before.json"
# The plan with the bandwidth just measured, so `explain` does not measure again.
BW0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bandwidth_gbps"])' "$TMP/bw_before.json")
# shellcheck disable=SC2086
"$NIBBLE" explain "$MODEL" --json --bandwidth "$BW0" $(echo "$EXTRA" | grep -o -- '--\(moe\|linear\)-backend [^ ]*' | tr '\n' ' ' || true) $THREADS_FLAG > "$TMP/explain.json"
i=1
while [ "$i" -le "$R" ]; do
  # shellcheck disable=SC2086
  "$NIBBLE" run "$MODEL" -p "$PROMPT" -n "$N" --temp 1 --seed "$i" --bandwidth "$BW0" $EXTRA > /dev/null 2> "$TMP/run$i.err"
  grep '^\[nibble\]' "$TMP/run$i.err" | tail -1 > "$TMP/run$i.line"
  echo "run $i: $(sed 's/^\[nibble\] //' "$TMP/run$i.line") [load $(load)]"
  i=$((i + 1))
done
# shellcheck disable=SC2086
"$NIBBLE" bench bandwidth --json $THREADS_FLAG > "$TMP/bw_after.json"
LOAD_AFTER=$(load)

python3 - "$TMP" "$MODEL" "$R" "$N" "$LOAD_BEFORE" "$LOAD_AFTER" "$EXTRA" <<'EOF'
import json, re, statistics, sys
tmp, model, runs, n, load_before, load_after, extra = sys.argv[1:8]
runs = int(runs)
explain = json.load(open(f"{tmp}/explain.json"))
bw_before = json.load(open(f"{tmp}/bw_before.json"))["bandwidth_gbps"]
bw_after = json.load(open(f"{tmp}/bw_after.json"))["bandwidth_gbps"]
rates, prefill = [], []
for i in range(1, runs + 1):
    line = open(f"{tmp}/run{i}.line").read()
    m = re.search(r"(\d+) decode steps in ([0-9.]+) s", line)
    p = re.search(r"prompt (\d+) tokens in ([0-9.]+) s", line)
    if not m or int(m.group(1)) == 0:
        sys.exit(f"decode_bound.sh: run {i}: no decode steps in: {line!r}")
    rates.append(int(m.group(1)) / float(m.group(2)))
    prefill.append(float(p.group(2)))
bpt = explain["bytes_per_token"]
med = statistics.median(rates)
kernels = {g["group"]: g["kernel"] for g in explain["groups"] if g.get("kernel")}
out = {
    "model": model, "params": explain["model"]["params"], "bytes_per_token": bpt,
    "kernels": kernels, "flags": extra.strip(),
    "tokens_per_run": int(n), "runs": runs,
    "decode_tok_s": [round(r, 3) for r in rates], "decode_tok_s_median": med,
    "decode_tok_s_min": min(rates), "decode_tok_s_max": max(rates),
    "bandwidth_gbps_before": bw_before, "bandwidth_gbps_after": bw_after,
    "bound_tok_s_before": bw_before * 1e9 / bpt, "bound_tok_s_after": bw_after * 1e9 / bpt,
    "ratio_before": med / (bw_before * 1e9 / bpt), "ratio_after": med / (bw_after * 1e9 / bpt),
    "load_before": load_before, "load_after": load_after,
}
print(f"{model}: {bpt / 1e6:.2f} MB/token; decode {med:.2f} tok/s (median of {runs}, "
      f"{min(rates):.2f}-{max(rates):.2f}); bandwidth {bw_before:.1f} / {bw_after:.1f} GB/s before/after -> bound "
      f"{out['bound_tok_s_before']:.2f} / {out['bound_tok_s_after']:.2f} tok/s, ratio "
      f"{out['ratio_before']:.2f} / {out['ratio_after']:.2f}; load {load_before} / {load_after}", file=sys.stderr)
print(json.dumps(out))
EOF
