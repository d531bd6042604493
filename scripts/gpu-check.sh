#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: runs every CUDA test, the
# CUDA device discovery through `nibble explain --device cuda`, and the GPU
# benchmark (W4A16 MoE at 1..64 tokens vs the read bandwidth measured in the
# same run), and writes a summary. Needs only the bundle that
# scripts/gpu-bundle.sh builds on a development machine (none of the
# project's Debian packages, no network, no compiler) and the GPU driver.
# Finishes in well under 8 minutes (each step has its own timeout).
#
#   scripts/gpu-check.sh [BUNDLE]      (default build/gpu-bundle)
# Results go to $OUT when set (the device tool's folder), else BUNDLE/out:
# summary.txt, one log per step, moe_bench.csv.
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:-build/gpu-bundle}
RESULTS=${OUT:-$BUNDLE/out}
mkdir -p "$RESULTS"
summary="$RESULTS/summary.txt"
: >"$summary"
if [ ! -x "$BUNDLE/bin/test_cuda" ]; then
  echo "gpu-check: no bundle at $BUNDLE (build it with scripts/gpu-bundle.sh)" | tee -a "$summary"
  exit 2
fi
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0

# step NAME TIMEOUT_S CMD...: runs CMD into NAME.log, appends one line to the summary.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && failed=$((failed + 1))
  printf '%-10s rc=%-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) "$*" | tee -a "$summary"
}

{
  echo "gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
} | tee -a "$summary"

step test_cuda 300 "$BUNDLE/bin/test_cuda" --gtest_color=no
step explain 60 "$BUNDLE/bin/nibble" explain models/dsv4-tiny --device cuda --json
step bench 240 "$BUNDLE/bin/cuda_moe_bench" --iters 50 --csv "$RESULTS/moe_bench.csv"

{
  echo "--- test_cuda"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\] [0-9]+ tests|Failure|SKIPPED \]|^\[cuda\]' "$RESULTS/test_cuda.log" | head -40
  echo "--- explain (device and routed experts)"
  grep -E '"(name|description|sm|bandwidth_gbps|kernel|kernel_units)"|no CUDA device' "$RESULTS/explain.log" | head -12
  echo "--- bench"
  cat "$RESULTS/bench.log"
  echo "--- $failed step(s) failed"
} >>"$summary"
cat "$summary"
exit $((failed > 0))
