#!/bin/sh
# Whole-model decode speed against the bandwidth bound (performance.md:
# tokens/s <= read bandwidth / weight bytes read per token).
#
#   bench/decode_bound.sh [MODEL_DIR] [options]        (default: models/dsv4-tiny)
#     -n N        tokens to generate per run (default 64; the first comes from the
#                 prompt's forward, so N - 1 decode steps are timed)
#     -r R        runs (default 5)
#     --build DIR build folder with the nibble binary (default build/release)
#     anything else is passed to `nibble run` (e.g. --threads 2, --moe-backend X)
#
# Each run: `nibble run MODEL -p PROMPT -n N --temp 1 --seed <run>` (sampling
# at temperature 1, a different seed per run, so hash-routed layers see varied
# tokens and route to varied experts instead of a greedy loop's few; the
# weights then come from DRAM, not cache). bytes_per_token comes from
# `nibble explain --json` (every weight one decoded token reads: attention,
# shared + top-k routed experts at their stored size, router, hc, head, one
# embedding row). Read bandwidth is `nibble bench bandwidth` (best pass over a
# 2 GiB cold buffer, same threads), probed right before and right after EACH
# run: on this shared machine bandwidth swings 3-4x within a minute, so a
# run's ratio = its tok/s / (mean of its two probes / bytes_per_token), and
# the summary gives the median and the best of the per-run ratios. The model
# files are read once first (cat > /dev/null) when they fit in half the
# available memory, so the runs read DRAM, not disk. The load average is
# printed with every run.
#
# Output: one line per run and a summary line on stderr, one JSON object on stdout.
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
# The probe uses the same threads as the runs.
THREADS_FLAG=$(echo "$EXTRA" | grep -o -- '--threads [0-9]*' || true)
probe() {
  # shellcheck disable=SC2086
  "$NIBBLE" bench bandwidth --json $THREADS_FLAG |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["bandwidth_gbps"])'
}

LOAD_BEFORE=$(load)
# Page cache: read the weights once if they fit comfortably.
SIZE_KB=$(du -kL "$MODEL" | tail -1 | cut -f1)
AVAIL_KB=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
if [ "$SIZE_KB" -lt $((AVAIL_KB / 2)) ]; then cat "$MODEL"/*.safetensors > /dev/null; fi
BW0=$(probe)
# The plan with a bandwidth just measured, so `explain` and `run` do not measure again.
BACKENDS=$(echo "$EXTRA" | grep -o -- '--\(moe\|linear\)-backend [^ ]*' | tr '\n' ' ' || true)
# shellcheck disable=SC2086
"$NIBBLE" explain "$MODEL" --json --bandwidth "$BW0" $BACKENDS $THREADS_FLAG > "$TMP/explain.json"
i=1
while [ "$i" -le "$R" ]; do
  BW_A=$(probe)
  # shellcheck disable=SC2086
  "$NIBBLE" run "$MODEL" -p "$PROMPT" -n "$N" --temp 1 --seed "$i" --bandwidth "$BW0" $EXTRA \
    > /dev/null 2> "$TMP/run$i.err"
  BW_B=$(probe)
  grep '^\[nibble\]' "$TMP/run$i.err" | tail -1 > "$TMP/run$i.line"
  echo "$BW_A $BW_B $(load)" > "$TMP/run$i.bw"
  echo "run $i: $(sed 's/^\[nibble\] //' "$TMP/run$i.line") [bandwidth $BW_A / $BW_B GB/s before / after; load $(load)]" >&2
  i=$((i + 1))
done
LOAD_AFTER=$(load)

python3 - "$TMP" "$MODEL" "$R" "$N" "$LOAD_BEFORE" "$LOAD_AFTER" "$EXTRA" <<'PY'
import json, re, statistics, sys
tmp, model, runs, n, load_before, load_after, extra = sys.argv[1:8]
runs = int(runs)
explain = json.load(open(f"{tmp}/explain.json"))
bpt = explain["bytes_per_token"]
per_run = []
for i in range(1, runs + 1):
    line = open(f"{tmp}/run{i}.line").read()
    bw_a, bw_b, *load = open(f"{tmp}/run{i}.bw").read().split()
    m = re.search(r"(\d+) decode steps in ([0-9.]+) s", line)
    if not m or int(m.group(1)) == 0:
        sys.exit(f"decode_bound.sh: run {i}: no decode steps in: {line!r}")
    rate = int(m.group(1)) / float(m.group(2))
    bw = (float(bw_a) + float(bw_b)) / 2
    bound = bw * 1e9 / bpt
    per_run.append({"decode_tok_s": rate, "bandwidth_gbps_before": float(bw_a), "bandwidth_gbps_after": float(bw_b),
                    "bound_tok_s": bound, "ratio": rate / bound, "load": " ".join(load)})
rates = [r["decode_tok_s"] for r in per_run]
ratios = [r["ratio"] for r in per_run]
best = max(per_run, key=lambda r: r["ratio"])
kernels = {g["group"]: g["kernel"] for g in explain["groups"] if g.get("kernel")}
out = {
    "model": model, "params": explain["model"]["params"], "bytes_per_token": bpt,
    "kernels": kernels, "flags": extra.strip(), "tokens_per_run": int(n), "runs": per_run,
    "decode_tok_s_median": statistics.median(rates), "decode_tok_s_max": max(rates),
    "ratio_median": statistics.median(ratios), "ratio_best": best["ratio"],
    "load_before": load_before, "load_after": load_after,
}
print(f"{model}: {bpt / 1e6:.2f} MB/token; decode {out['decode_tok_s_median']:.2f} tok/s median of {runs} "
      f"({min(rates):.2f}-{max(rates):.2f}); ratio to the bandwidth bound: median {out['ratio_median']:.2f}, best "
      f"{best['ratio']:.2f} ({best['decode_tok_s']:.2f} tok/s vs bound {best['bound_tok_s']:.2f} at "
      f"{(best['bandwidth_gbps_before'] + best['bandwidth_gbps_after']) / 2:.1f} GB/s); "
      f"load {load_before} -> {load_after}", file=sys.stderr)
print(json.dumps(out))
PY
