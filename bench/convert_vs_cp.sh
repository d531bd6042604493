#!/bin/sh
# Throughput of `nibble convert --to nvfp4` against copying the same bytes
# with cp, in the same run (performance.md: ratios, not absolute numbers).
#
#   bench/convert_vs_cp.sh [NIBBLE] [WORK_DIR] [LAYERS]
#
# Makes a synthetic DeepSeek-V4 stock checkpoint (bench/make_synthetic_stock.py;
# about 0.41 GB per layer at the real expert dimensions, 4 layers by default),
# then times, three times each and interleaved:
#   cp        cp -r SRC DST                (data may still be dirty in memory)
#   cp+sync   cp -r SRC DST && sync        (on disk, as convert guarantees)
#   convert   nibble convert SRC DST --to nvfp4   (fsyncs every file and reads
#             every shard back before renaming DST into place)
# Each run starts with SRC in the page cache and the disk idle (sync first).
# Prints the medians and convert's speed relative to cp and cp+sync.
set -eu
NIBBLE=${1:-build/release/nibble}
WORK=${2:-/tmp/nibble-convert-bench}
LAYERS=${3:-4}
HERE=$(dirname "$0")

rm -rf "$WORK"
mkdir -p "$WORK"
python3 "$HERE/make_synthetic_stock.py" "$WORK/src" --layers "$LAYERS"
BYTES=$(du -sb "$WORK/src" | cut -f1)
cat "$WORK"/src/* > /dev/null   # SRC in the page cache for every run

now() { date +%s.%N; }
run() {  # run NAME COMMAND...: prints seconds
  name=$1; shift
  rm -rf "$WORK/dst"; sync
  t0=$(now)
  "$@" > /dev/null
  t1=$(now)
  echo "$t1 - $t0" | bc
}
median() { sort -n | sed -n 2p; }

: > "$WORK/cp"; : > "$WORK/cpsync"; : > "$WORK/convert"
for i in 1 2 3; do
  run cp cp -r "$WORK/src" "$WORK/dst" >> "$WORK/cp"
  run cpsync sh -c "cp -r '$WORK/src' '$WORK/dst' && sync" >> "$WORK/cpsync"
  run convert "$NIBBLE" convert "$WORK/src" "$WORK/dst" --to nvfp4 --quiet >> "$WORK/convert"
done
CP=$(median < "$WORK/cp"); CPS=$(median < "$WORK/cpsync"); CV=$(median < "$WORK/convert")
echo "bytes      $BYTES"
echo "cp         $CP s  ($(echo "$BYTES / $CP / 1000000" | bc) MB/s)   runs: $(tr '\n' ' ' < "$WORK/cp")"
echo "cp+sync    $CPS s  ($(echo "$BYTES / $CPS / 1000000" | bc) MB/s)   runs: $(tr '\n' ' ' < "$WORK/cpsync")"
echo "convert    $CV s  ($(echo "$BYTES / $CV / 1000000" | bc) MB/s)   runs: $(tr '\n' ' ' < "$WORK/convert")"
# CPU seconds (user + sys) of one more run each: on a shared, oversubscribed
# machine wall time follows CPU time, not the disk.
cpu() { rm -rf "$WORK/dst"; sync; /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
echo "cpu s      cp $(cpu cp -r "$WORK/src" "$WORK/dst")  convert $(cpu "$NIBBLE" convert "$WORK/src" "$WORK/dst" --to nvfp4 --quiet)  (load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "convert speed / cp speed       $(echo "scale=2; $CP / $CV" | bc)"
echo "convert speed / cp+sync speed  $(echo "scale=2; $CPS / $CV" | bc)"
rm -rf "$WORK"
