#!/usr/bin/env bash
# `nibble bench decode` of two builds, interleaved:
#   bench/decode_ab.sh OLD_NIBBLE NEW_NIBBLE MODEL_DIR [ROUNDS] [SEQUENCES] [STEPS] [PROMPT_TOKENS]
# Each round runs OLD then NEW (order alternating by round) over the same
# sequence counts (default 1,2,4,8,16), steps (default 16) and prompt tokens
# (default 64), each row with its own bandwidth probe, and prints one JSON line per row with the build
# ("old"/"new"), the round, user+system CPU seconds of the whole run and the
# 1-minute load before it. The summary (stderr-free, last lines) gives per
# build and sequence count the median decode tok/s and ratio to the bound.
# The machine is shared: read the load beside every number.
set -euo pipefail
old=$1 new=$2 model=$3 rounds=${4:-3} seqs=${5:-1,2,4,8,16} steps=${6:-16} prompt=${7:-64}
out=$(mktemp)
run() {  # BUILD_NAME BINARY ROUND
  local load t0 json
  load=$(cut -d' ' -f1 /proc/loadavg)
  json=$( { /usr/bin/time -f 'cpu %U %S' "$2" bench decode "$model" --sequences "$seqs" -n "$steps" --prompt-tokens "$prompt" --json; } 2>&1)
  local cpu
  cpu=$(echo "$json" | sed -n 's/^cpu \([0-9.]*\) \([0-9.]*\)$/\1 \2/p' | awk '{print $1 + $2}')
  echo "$json" | grep '^{' | while read -r line; do
    echo "{\"build\":\"$1\",\"round\":$3,\"load\":$load,\"cpu_s\":$cpu,\"row\":$line}"
  done | tee -a "$out"
}
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then run old "$old" "$i"; run new "$new" "$i"; else run new "$new" "$i"; run old "$old" "$i"; fi
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["row"]["sequences"], r["build"]), []).append(r)
print("seqs build decode_tok/s(median) ratio(median) bound/s(median) runs loads")
for (s, b), rs in sorted(by.items()):
    med = lambda k: statistics.median(x["row"][k] for x in rs)
    print(s, b, round(med("decode_tokens_per_s"), 2), round(med("ratio"), 3), round(med("bound_tokens_per_s"), 1),
          len(rs), ",".join(str(x["load"]) for x in rs))
PY
rm -f "$out"
