#!/bin/sh
# KL divergence of each kernel backend's next-token distributions from the
# f64 reference (cpu_ref) on the shipped model's held-out text (Julius
# Caesar, never trained on), as llama.cpp reports KLD for its quant types.
#
#   bench/kld_backends.sh [--build DIR] [--tokens N] [BACKEND ...]
#
# BACKEND is a --moe-backend / --linear-backend pair written MOE:LINEAR
# (e.g. cpu_avx512:cpu_avx512, cpu_ref:auto); default: auto:auto and every
# MoE kernel `nibble explain` lists for this machine with the planner's
# linear kernels, then the linear kernels with the reference MoE. Names come
# from the plan, never from this script. One line per pair on stderr, one
# JSON object per pair on stdout (nibble kld --json, plus the pair).
set -e
BUILD=build/release
TOKENS=""
PAIRS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --tokens) TOKENS="--tokens $2"; shift 2 ;;
    *) PAIRS="$PAIRS $1"; shift ;;
  esac
done
NIBBLE="$BUILD/nibble"
MODEL=models/dsv4-tiny
TEXT=$MODEL/heldout.txt
[ -x "$NIBBLE" ] || { echo "kld_backends.sh: no nibble binary at $NIBBLE" >&2; exit 2; }
if [ -z "$PAIRS" ]; then
  # Every kernel the planner considered for each op on this machine (chosen + rejected).
  KERNELS=$("$NIBBLE" explain "$MODEL" --json --bandwidth 10 | python3 -c '
import json, sys
j = json.load(sys.stdin)
for op in ("moe", "linear"):
    names = set()
    for g in j["groups"]:
        if g.get("op") == op:
            names.add(g["kernel"])
            # Runnable: only slower, or opt-in (the others cannot run here).
            names.update(r["kernel"] for r in g["rejected"]
                         if r["reason"].startswith("slower") or "opt in with" in r["reason"])
    names.discard(None)
    names.discard("cpu_ref")
    print(op, " ".join(sorted(names)))
')
  MOES=$(echo "$KERNELS" | awk '$1 == "moe" {$1 = ""; print}')
  LINEARS=$(echo "$KERNELS" | awk '$1 == "linear" {$1 = ""; print}')
  PAIRS="auto:auto"
  for m in $MOES; do PAIRS="$PAIRS $m:auto"; done
  for l in $LINEARS; do PAIRS="$PAIRS cpu_ref:$l"; done
fi
for pair in $PAIRS; do
  moe=${pair%%:*}
  linear=${pair#*:}
  # shellcheck disable=SC2086
  "$NIBBLE" kld "$MODEL" --text "$TEXT" $TOKENS --moe-backend "$moe" --linear-backend "$linear" --bandwidth 10 --json |
    python3 -c '
import json, sys
j = json.load(sys.stdin)
j["pair"] = sys.argv[1]
k, t, b = j["kld"], j["test"], j["base"]
line = "%-26s (%s / %s): %d positions, mean KLD %.3g +- %.2g, median %.3g, p99 %.3g, max %.3g, same top %.2f%%, PPL %.4f -> %.4f" % (
    sys.argv[1], t["moe_kernels"], t["linear_kernels"], j["positions"], k["mean"], k["stderr"], k["median"],
    k["p99"], k["max"], 100 * j["same_top_fraction"], b["ppl"], t["ppl"])
print(line, file=sys.stderr)
print(json.dumps(j))
' "$pair"
done
