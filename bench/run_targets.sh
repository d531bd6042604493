#!/bin/sh
# The CPU kernel targets of performance.md, one JSON line per measurement
# (ratio = effective weight bandwidth / read bandwidth measured in the same
# run). Usage: bench/run_targets.sh [BUILD_DIR] [extra flags, e.g. --threads 2]
#
#   MoE layer decode, DeepSeek-V4-Flash dims, MXFP4 / NVFP4, batch 1: ratio >= 0.85
#   FP8 block-128 GEMV 4096 x 4096, batch 1: ratio >= 0.80; batch 4 <= 1.5x batch 1
#   MoE with shared routing: batch 4 <= 1.5x batch 1 (same routing width per token)
#   MoE batch sweep: where decode stops being bandwidth-bound
# For every ISA, the default (exact) kernels and the opt-in int8 FP4 ones;
# first, plain reading through the MoE and FP8 ops (--backend read).
set -e
BUILD=${1:-build/release}
[ $# -gt 0 ] && shift
NIBBLE="$BUILD/nibble"
for f in mxfp4 nvfp4; do
  "$NIBBLE" bench moe --format $f --preset dsv4-flash --batch 1 --backend read --json "$@"
done
"$NIBBLE" bench linear --format fp8_block128 --rows 4096 --cols 4096 --batch 1 --backend read --json "$@"
for isa in avx512 avx2; do
  "$NIBBLE" bench bandwidth --json "$@"
  for backend in cpu_$isa cpu_${isa}_int8; do
    for f in mxfp4 nvfp4; do
      "$NIBBLE" bench moe --format $f --preset dsv4-flash --batch 1,2,4,8 --backend $backend --json "$@"
      "$NIBBLE" bench moe --format $f --preset dsv4-flash --batch 1,4 --routing shared --backend $backend --json "$@"
      "$NIBBLE" bench linear --format $f --rows 4096 --cols 4096 --batch 1,2,4,8 --backend $backend --json "$@"
      "$NIBBLE" bench linear --format $f --rows 256 --cols 4096 --batch 1,2,4,8 --resident --iters 200 --bandwidth 10 --backend $backend --json "$@"
    done
  done
  "$NIBBLE" bench linear --format fp8_block128 --rows 4096 --cols 4096 --batch 1,2,4,8 --backend cpu_$isa --json "$@"
  "$NIBBLE" bench linear --format bf16 --rows 4096 --cols 4096 --batch 1,4 --backend cpu_$isa --json "$@"
done
