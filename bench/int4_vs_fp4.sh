#!/bin/sh
# The exact INT4 kernels (int4_f32_avx2.cpp / int4_f32_avx512.cpp) beside the
# exact MXFP4 ones on the same shapes, interleaved so that both see the same
# machine: every measurement runs INT4 then MXFP4, ROUNDS times. Each JSON
# line is tagged with the 1-minute load average at its start and the user /
# system CPU seconds of its whole process (/usr/bin/time: on a machine shared
# with other work the wall-clock ratio to the paired probe understates a
# compute-bound kernel; CPU time does not move with the others' load).
#
# Measured: the ratio of weight GB/s to the bandwidth probe paired with each
# call (`nibble bench`'s ratio) for GEMV 4096 x 4096 and 7168 x 2048 (Kimi
# K2's expert down projection shape) and the DeepSeek-V4-Flash MoE layer
# (256 experts, top-6 + shared) at 1, 2, 4, 8 tokens; and the compute ceiling
# (one in-cache matrix, one thread, CPU clock).
#
# With PERCORE=1 the DRAM measurements run on one thread with --cpu-clock
# (kernel and probe timed by the thread's CPU clock, so other processes' CPU
# use drops out of both: the per-core ratio), and the resident ones are
# skipped (they are per-core already).
#
# Usage: [PERCORE=1] bench/int4_vs_fp4.sh [BUILD_DIR] [ROUNDS] [ISA...]   (> bench/results/NAME.jsonl)
set -e
BUILD=${1:-build/release}
ROUNDS=${2:-1}
shift 2 2>/dev/null || true
ISAS=${*:-avx512 avx2}
NIBBLE="$BUILD/nibble"
PC=""
[ "${PERCORE:-0}" = 1 ] && PC="--threads 1 --cpu-clock"
TIMES=$(mktemp)
trap 'rm -f "$TIMES"' EXIT

tag() {  # runs a bench command; adds "load", "user_s", "sys_s" to its JSON lines
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$(/usr/bin/time -f '%U %S' -o "$TIMES" nice "$NIBBLE" bench "$@" --json)
  read -r user sys < "$TIMES"
  echo "$out" | sed "s/^{/{\"load\":$load,\"user_s\":$user,\"sys_s\":$sys,/"
}

echo "# uptime at start: $(uptime)" >&2
for round in $(seq "$ROUNDS"); do
  for isa in $ISAS; do
    if [ -z "$PC" ]; then
      for f in int4 mxfp4; do
        tag linear --format $f --rows 256 --cols 4096 --batch 1,2,4,8 --resident --iters 300 --bandwidth 10 --isa $isa
      done
    fi
    for f in int4 mxfp4; do
      tag linear --format $f --rows 4096 --cols 4096 --batch 1,2,4,8 --isa $isa $PC
      tag linear --format $f --rows 7168 --cols 2048 --batch 1,2,4,8 --isa $isa $PC
    done
    for f in int4 mxfp4; do
      tag moe --format $f --preset dsv4-flash --batch 1,2,4,8 --isa $isa $PC
    done
  done
done
echo "# uptime at end: $(uptime)" >&2
