#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: runs every CUDA test, the
# CUDA device discovery and planning through `nibble explain --device cuda`,
# the GPU benchmarks (`nibble bench moe|linear --device cuda`: the W4A16
# MoE on MXFP4, NVFP4 and INT4 experts and the FP8 / BF16 tensor-core
# linears at 1..64 tokens against the read bandwidth measured in the same
# run), and the whole model on the GPU: test_cuda's DeepseekV4Gpu tests
# against the CPU, then a DeepSeek-V4-Flash-shaped checkpoint with two
# full-size layers written here (tools/make_flash_shaped.py: numpy and torch
# or ml_dtypes) and `nibble bench decode --device cuda` on it, with decode
# steps as CUDA graphs and without (--no-cuda-graphs); one summary table at
# the end.
# Needs only the bundle that scripts/gpu-bundle.sh builds on a development
# machine (none of the project's Debian packages, no network, no compiler)
# and the GPU driver. Never run yet. Each step has its own timeout, cut to
# what is left of the budget (GPU_CHECK_SECONDS, default 560: 9 min 20 s;
# steps past it are listed as not run), so a device call with timeout_s
# 10 s above the budget always returns the summary. A session's device time
# (15 min, the machine's start included) fits one full run; to leave room
# for a rerun, run with GPU_CHECK_SECONDS=300 (tests, explain, the KL and
# the benchmarks come first), then rerun the rest with GPU_CHECK_SKIP
# naming the steps already done.
#
#   scripts/gpu-check.sh [BUNDLE]      (default build/gpu-bundle)
#   GPU_CHECK_SECONDS=S                the budget in seconds
#   GPU_CHECK_SKIP="test_cuda explain" steps not to run (listed as skipped)
# Results go to $OUT when set (the device tool's folder), else BUNDLE/out:
# summary.txt, one log per step, bench_*.jsonl.
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:-build/gpu-bundle}
RESULTS=${OUT:-$BUNDLE/out}
mkdir -p "$RESULTS"
summary="$RESULTS/summary.txt"
: >"$summary"
if [ ! -x "$BUNDLE/bin/test_cuda" ] || [ ! -x "$BUNDLE/bin/nibble" ]; then
  echo "gpu-check: no bundle at $BUNDLE (build it with scripts/gpu-bundle.sh)" | tee -a "$summary"
  exit 2
fi
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nibble="$BUNDLE/bin/nibble"
# The tests find the binary and the tree (fixtures, the shipped model) here,
# not where they were built.
export NIBBLE_BINARY="$PWD/$nibble" NIBBLE_SOURCE_DIR="$PWD"
case "$BUNDLE" in /*) NIBBLE_BINARY="$nibble" ;; esac
failed=0
rows=()
budget=${GPU_CHECK_SECONDS:-560}
case "$budget" in '' | *[!0-9]*)
  echo "gpu-check: GPU_CHECK_SECONDS must be a whole number of seconds, got '$budget'" | tee -a "$summary"
  exit 2 ;;
esac
deadline=$((SECONDS + budget))
skip=" ${GPU_CHECK_SKIP:-} "

# step [-optional] NAME TIMEOUT_S CMD...: runs CMD into NAME.log and adds a
# row to the table; a failing optional step is reported, not counted.
step() {
  local optional=0
  if [ "$1" = -optional ]; then optional=1; shift; fi
  local name=$1 limit=$2
  shift 2
  if [[ "$skip" == *" $name "* ]]; then
    rows+=("$(printf '%-16s %-18s' "$name" "skipped (GPU_CHECK_SKIP)")")
    return
  fi
  local left=$((deadline - SECONDS))
  if [ $left -lt 5 ]; then
    rows+=("$(printf '%-16s %-18s' "$name" "not run (no time)")")
    [ $optional -eq 0 ] && failed=$((failed + 1))
    return
  fi
  [ "$limit" -gt $left ] && limit=$left
  ran_steps+=" $name "
  local t0=$SECONDS
  timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
  local rc=$?
  local verdict=ok
  if [ $rc -ne 0 ]; then
    if [ $optional -eq 0 ]; then verdict=FAILED; failed=$((failed + 1)); else verdict="failed (optional)"; fi
  fi
  rows+=("$(printf '%-16s %-18s rc=%-3d %4ds' "$name" "$verdict" "$rc" $((SECONDS - t0)))")
}
# ran NAME: whether step NAME ran (its output checks apply only then).
ran_steps=" "
ran() { [[ "$ran_steps" == *" $1 "* ]]; }
# fail_check NAME WHY: a condition on a step's output that did not hold.
fail_check() {
  rows+=("$(printf '%-16s %-18s %s' "$1" FAILED "$2")")
  failed=$((failed + 1))
}

gpus=0
{
  echo "gpu-check $(date -u +%FT%TZ) on $(hostname)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  else
    echo "nvidia-smi: not installed"
  fi
} | tee -a "$summary"
command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

step test_cuda 150 "$BUNDLE/bin/test_cuda" --gtest_color=no
# With a GPU present, a skipped test means the binary could not use it.
skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$RESULTS/test_cuda.log" || true)
if ran test_cuda && [ "$gpus" -gt 0 ] && [ "$skipped" -gt 0 ]; then
  fail_check test_cuda "$gpus GPU(s) present but $skipped test(s) skipped"
fi
# The device found and measured, the CUDA backend planned, and every group
# of the shipped model on a CUDA kernel (none on a CPU one).
# (The text form: in the JSON the rejected kernels are named the same way.)
step explain 40 "$nibble" explain models/dsv4-tiny --device cuda
if ran explain; then
  grep -q '^backend   cuda: runs every op' "$RESULTS/explain.log" || fail_check explain "no cuda backend (explain.log)"
  for k in cuda_w4a16 cuda_fp8_mma cuda_bf16_mma; do
    grep -qE " $k \((linear|moe)\)\$" "$RESULTS/explain.log" || fail_check explain "no group planned on $k (explain.log)"
  done
  if grep -qE ' cpu_[a-z0-9_]+ \((linear|moe)\)$' "$RESULTS/explain.log"; then
    fail_check explain "a group planned on a CPU kernel (explain.log)"
  fi
fi
# The shipped model's next-token distributions on the GPU against the CPU's
# exact kernels over held-out text (KL in nats: what BF16 activations cost).
step -optional kld_gpu 60 "$nibble" kld models/dsv4-tiny --text models/dsv4-tiny/heldout.txt --tokens 256 \
  --base-moe-backend auto --base-linear-backend auto --device cuda
# The benchmarks: one JSON line per row; a skipped one with a GPU present fails.
bench() {
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" "$nibble" bench "$@" --device cuda --json --iters 30
  ran "$name" || return 0
  if grep -q skipped "$RESULTS/$name.log"; then fail_check "$name" "skipped: $(head -1 "$RESULTS/$name.log")"; fi
  grep '^{' "$RESULTS/$name.log" >"$RESULTS/$name.jsonl" || true
}
# moe: w1, fused gate/up, w2 and the whole layer (3.4 GB of experts to upload).
bench moe_mxfp4 50 moe --format mxfp4
bench moe_nvfp4 50 moe --format nvfp4
bench moe_int4 50 moe --format int4
bench fp8_4096x4096 35 linear --format fp8_block128 --rows 4096 --cols 4096
bench fp8_16384x4096 35 linear --format fp8_block128 --rows 16384 --cols 4096
bench fp8_32768x1024 35 linear --format fp8_block128 --rows 32768 --cols 1024
bench bf16_16384x4096 35 linear --format bf16 --rows 16384 --cols 4096
# The whole model: a Flash-shaped checkpoint (two full-size layers, ~7 GB)
# and batched decode on the GPU against the GPU's measured read bandwidth.
flash=${FLASH_DIR:-/tmp/nibble-flash2}
if python3 -c 'import numpy' 2>/dev/null; then
  step -optional flash_write 100 python3 tools/make_flash_shaped.py "$flash" --force
  step -optional flash_decode 120 "$nibble" bench decode "$flash" --device cuda --sequences 1,2,4,8,16,32,64 \
    -n 8 --prompt-tokens 32 --json
  grep '^{' "$RESULTS/flash_decode.log" >"$RESULTS/flash_decode.json" 2>/dev/null || true
  # The same decode with every kernel launched by itself: what the step
  # graphs (model/cuda_step_graph.h) are worth, in the same run.
  step -optional flash_decode_eager 90 "$nibble" bench decode "$flash" --device cuda --sequences 1,8,64 \
    -n 8 --prompt-tokens 32 --json --no-cuda-graphs
  grep '^{' "$RESULTS/flash_decode_eager.log" >"$RESULTS/flash_decode_eager.json" 2>/dev/null || true
  # One sequence again with --profile: each phase waits for the GPU, so the
  # table splits a step's device time by phase (against the unprofiled step).
  step -optional flash_profile 90 "$nibble" bench decode "$flash" --device cuda --sequences 1 -n 8 \
    --prompt-tokens 32 --profile
fi
# Out-of-bounds accesses on the awkward shapes (compute-sanitizer may refuse
# the device in some sandboxes: reported, not counted).
if command -v compute-sanitizer >/dev/null && [ "$gpus" -gt 0 ]; then
  step -optional memcheck 70 compute-sanitizer --tool memcheck --error-exitcode 3 "$BUNDLE/bin/test_cuda" \
    --gtest_color=no \
    --gtest_filter='MoeW4A16Gpu.FixedAwkwardShapes:MoeW4A16Gpu.FusedGateUpSwiglu:LinearMmaGpu.FixedAwkwardShapes:MoeRouterGpu.*:SwigluGpu.*:WeightStoreGpu.*:CudaBackendGpu.Attend*:DeepseekV4Gpu.IncrementalMatchesFullForward'
fi

{
  echo
  echo "=== steps"
  printf '%s\n' "${rows[@]}"
  echo
  echo "=== test_cuda"
  grep -E '^\[  (FAILED|SKIPPED) |^\[==========\] [0-9]+ tests|^\[  PASSED  \]|Failure' "$RESULTS/test_cuda.log" | head -30
  echo
  echo "=== explain (device, backend, kernels)"
  grep -E '^(device|backend|group|[a-z_]+ +[a-z0-9_]+ +[0-9]+ )|^ {10}[0-9]+ SMs|no CUDA device|^NOT RUNNABLE|^decode reads' \
    "$RESULTS/explain.log" | cut -c1-160 | head -30
  echo
  echo "=== benchmarks: ratio = GB/s over the read bandwidth measured in the same run"
  printf '%-15s %-12s %6s %7s %5s %9s %8s %6s %7s %5s\n' bench format tokens experts split us GB/s ratio tensor best
  for f in "$RESULTS"/*.jsonl; do
    [ -s "$f" ] || continue
    b=$(basename "$f" .jsonl)
    # Fields by name, without jq or python (a bare image has neither for sure).
    sed -E 's/[{}"]//g' "$f" | awk -F, -v b="$b" '{
      for (i = 1; i <= NF; i++) { split($i, kv, ":"); v[kv[1]] = kv[2] }
      printf "%-15s %-12s %6s %7s %5s %9.1f %8.0f %6.2f %7.3f %2s:%.1f\n", b, v["format"], v["tokens"], v["experts"],
             v["k_splits"], v["us"], v["gbps"], v["ratio"], v["tensor_ratio"], v["best_split"], v["best_us"] }'
  done
  echo
  echo "=== the whole model: gpu vs cpu (test_cuda), bench decode --device cuda (Flash-shaped, 2 layers)"
  grep -h '^\[ gpu vs cpu \]' "$RESULTS/test_cuda.log" | cut -c1-300
  grep -E '^(base |test |Mean    KLD|Maximum KLD|Same top)' "$RESULTS/kld_gpu.log" 2>/dev/null
  grep -h '^\[ graphs \]' "$RESULTS/test_cuda.log" | cut -c1-300
  for run in flash_decode flash_decode_eager; do
    if [ -s "$RESULTS/$run.json" ]; then
      echo "$run:"
      sed -E 's/[{}"]//g' "$RESULTS/$run.json" | awk -F, '{
        for (i = 1; i <= NF; i++) { split($i, kv, ": "); gsub(/ /, "", kv[1]); v[kv[1]] = kv[2] }
        printf "seqs %4s  prefill %9.1f tok/s  decode %9.1f tok/s  bytes/step %12.0f  GB/s %7.1f  ratio %6.3f\n",
               v["sequences"], v["prefill_tokens_per_s"], v["decode_tokens_per_s"], v["bytes_per_step"],
               v["bandwidth_gbps"], v["ratio"] }'
    else
      tail -3 "$RESULTS/$run.log" 2>/dev/null
    fi
  done
  grep -h 'graph launches\|CUDA graphs off' "$RESULTS/flash_decode.log" "$RESULTS/flash_decode_eager.log" 2>/dev/null
  grep '^\[nibble profile\]' "$RESULTS/flash_profile.log" 2>/dev/null | head -24
  [ -f "$RESULTS/memcheck.log" ] && { echo; echo "=== memcheck"; tail -4 "$RESULTS/memcheck.log"; }
  echo
  echo "=== $failed check(s) failed"
} | tee -a "$summary"
exit $((failed > 0))
