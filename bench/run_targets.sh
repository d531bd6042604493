#!/bin/sh
# The CPU kernel targets of performance.md, one JSON line per measurement
# (ratio = effective weight bandwidth / read bandwidth measured in the same
# run). Usage: bench/run_targets.sh [BUILD_DIR] [extra flags, e.g. --threads 2]
#
#   MoE layer decode, DeepSeek-V4-Flash dims, MXFP4 / NVFP4, batch 1: ratio >= 0.85
#   FP8 block-128 GEMV 4096 x 4096, batch 1: ratio >= 0.80; batch 4 <= 1.5x batch 1
#   MoE batch sweep: where decode stops being bandwidth-bound
set -e
BUILD=${1:-build/release}
[ $# -gt 0 ] && shift
NIBBLE="$BUILD/nibble"
for isa in avx512 avx2; do
  "$NIBBLE" bench bandwidth --json "$@"
  "$NIBBLE" bench moe --format mxfp4 --preset dsv4-flash --batch 1,2,4,8 --isa $isa --json "$@"
  "$NIBBLE" bench moe --format nvfp4 --preset dsv4-flash --batch 1,2,4,8 --isa $isa --json "$@"
  "$NIBBLE" bench linear --format fp8_block128 --rows 4096 --cols 4096 --batch 1,2,4,8 --isa $isa --json "$@"
  "$NIBBLE" bench linear --format mxfp4 --rows 4096 --cols 4096 --batch 1,4 --isa $isa --json "$@"
  "$NIBBLE" bench linear --format nvfp4 --rows 4096 --cols 4096 --batch 1,4 --isa $isa --json "$@"
  "$NIBBLE" bench linear --format bf16 --rows 4096 --cols 4096 --batch 1,4 --isa $isa --json "$@"
done
