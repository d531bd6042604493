#!/usr/bin/env bash
# Single-sequence prefill and decode of two nibble builds, back to back:
#   bench/single_sequence_ab.sh OLD_NIBBLE NEW_NIBBLE MODEL_DIR [ROUNDS] [THREADS]
# Each round runs `nibble run` with OLD then NEW (order alternating by round)
# on the same prompt (the first 1,500 characters of the shipped model's
# held-out text) with greedy decoding of 32 tokens, and parses the summary
# line: prompt tokens/s (prefill) and decode tokens/s. Prints one line per
# run and the medians per build. Needs an otherwise idle machine.
set -euo pipefail
old=$1 new=$2 model=$3 rounds=${4:-7} threads=${5:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
prompt=$(head -c 1500 "$root/models/dsv4-tiny/heldout.txt")
run() {  # BINARY -> "prefill decode"
  "$1" run "$model" -p "$prompt" -n 32 --temp 0 --threads "$threads" --bandwidth 10 2>&1 >/dev/null |
    sed -n 's/.*prompt \([0-9]*\) tokens in [0-9.]* s (\([0-9.]*\) tok\/s).* decode steps in [0-9.]* s (\([0-9.]*\) tok\/s).*/\2 \3 \1/p' | tail -1
}
declare -a po pn do dn
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then a=$(run "$old"); b=$(run "$new"); else b=$(run "$new"); a=$(run "$old"); fi
  echo "round $i old prefill/decode/prompt_tokens: $a   new: $b   load: $(cut -d' ' -f1 /proc/loadavg)"
  po+=("$(echo "$a" | cut -d' ' -f1)"); do+=("$(echo "$a" | cut -d' ' -f2)")
  pn+=("$(echo "$b" | cut -d' ' -f1)"); dn+=("$(echo "$b" | cut -d' ' -f2)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "median old: prefill $(median "${po[@]}") tok/s, decode $(median "${do[@]}") tok/s"
echo "median new: prefill $(median "${pn[@]}") tok/s, decode $(median "${dn[@]}") tok/s"
