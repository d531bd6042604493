#!/bin/sh
# Interleaved A/B of two nibble binaries on the kernels the batch-invariance
# change touched (notes/batchinv.md): per round, each backend x format runs
# A then B (B then A on odd rounds), resident (one in-cache copy, one
# thread, CPU-clock timing: the per-core compute ceiling), batches 1,2,3,4,8.
# Output: "A <json>" / "B <json>" lines; bench/batchinv_summary.py turns them
# into medians. Usage: bench/batchinv_ab.sh A_BIN B_BIN [ROUNDS] [BACKENDS] [FORMATS]
set -e
A=$1
B=$2
ROUNDS=${3:-5}
BACKENDS=${4:-"cpu_avx512 cpu_avx2"}
FORMATS=${5:-"mxfp4 nvfp4 fp8_block128"}
run() {
  "$2" bench linear --format "$4" --rows 256 --cols 4096 --batch 1,2,3,4,8 --resident --iters 200 \
    --bandwidth 10 --backend "$3" --json | sed "s/^/$1 /"
}
r=0
while [ $r -lt "$ROUNDS" ]; do
  for be in $BACKENDS; do
    for f in $FORMATS; do
      if [ $((r % 2)) -eq 0 ]; then run A "$A" "$be" "$f"; run B "$B" "$be" "$f"
      else run B "$B" "$be" "$f"; run A "$A" "$be" "$f"; fi
    done
  done
  r=$((r + 1))
done
