#!/bin/sh
# The default (exact) FP4 kernels against the opt-in int8 ones, interleaved
# so that both see the same machine: every measurement is run for one
# backend and then the other, ROUNDS times, each JSON line tagged with the
# load average at its start. bench/summarize_fp4.py turns the output into
# the tables of RESULTS.md.
#
# With IDLE=1 every measurement first waits for an idle machine
# (bench/when_idle.sh): on the shared 2-core machine, measurements taken
# while another process runs understate compute-bound kernels.
#
# With PERCORE=1 the DRAM measurements run on one thread with --cpu-clock:
# kernel and probe timed by the thread's CPU clock, so other processes' CPU
# use drops out of both (the per-core question: does one core's compute keep
# up with what one core reads?). Slower to set up (one thread fills 3.4 GB).
#
# Usage: [IDLE=1] [PERCORE=1] bench/fp4_exact_vs_int8.sh [BUILD_DIR] [ROUNDS] [ISA...]   (> results/NAME.jsonl)
set -e
BUILD=${1:-build/release}
ROUNDS=${2:-2}
shift 2 2>/dev/null || true
ISAS=${*:-avx512 avx2}
NIBBLE="$BUILD/nibble"

WAIT=""
PC=""
[ "${PERCORE:-0}" = 1 ] && PC="--threads 1 --cpu-clock"
[ "${IDLE:-0}" = 1 ] && WAIT="$(dirname "$0")/when_idle.sh"

tag() {  # runs a bench command, adds "load" (1-minute load average) to its JSON lines
  [ -n "$WAIT" ] && "$WAIT" true
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$NIBBLE" bench "$@" --json | sed "s/^{/{\"load\":$load,/"
}

for round in $(seq "$ROUNDS"); do
  for isa in $ISAS; do
    for backend in cpu_$isa cpu_${isa}_int8; do
      for f in mxfp4 nvfp4; do
        # Compute ceilings: one in-cache matrix, one thread, CPU clock.
        tag linear --format $f --rows 256 --cols 4096 --batch 1,2,4,8 --resident --iters 300 --bandwidth 10 --backend $backend
      done
    done
    for f in mxfp4 nvfp4; do
      for backend in cpu_$isa cpu_${isa}_int8; do
        tag moe --format $f --preset dsv4-flash --batch 1,2,4,8 --backend $backend $PC
        tag moe --format $f --preset dsv4-flash --batch 1,4 --routing shared --backend $backend $PC
        tag linear --format $f --rows 4096 --cols 4096 --batch 1,2,4,8 --backend $backend $PC
      done
    done
  done
done
