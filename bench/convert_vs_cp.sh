#!/bin/sh
# Throughput of `nibble convert --to nvfp4` against copying the same bytes
# with cp, in the same run (performance.md: ratios, not absolute numbers).
#
#   bench/convert_vs_cp.sh [NIBBLE] [WORK_DIR] [LAYERS] [RUNS]
#
# Makes a synthetic DeepSeek-V4 stock checkpoint (bench/make_synthetic_stock.py;
# about 0.41 GB per layer at the real expert dimensions, 4 layers by default),
# then times, RUNS times each (5 by default), interleaved in rotating order:
#   cp         cp -r SRC DST            (the data may still be dirty in memory)
#   cp+sync    cp -r SRC DST && sync DST/* DST   (fsyncs the copied files and
#              the folder: on disk, as convert guarantees)
#   convert    nibble convert SRC DST --to nvfp4   (default --jobs 2; fsyncs
#              every file and reads every shard back before renaming DST
#              into place)
#   convert-j1 the same with --jobs 1 (one shard at a time)
# Each run starts with SRC just read (in the page cache), DST absent and the
# disk idle (sync first). Prints the byte count, the load average before and after,
# the medians (wall seconds, MB/s, CPU seconds = user + sys) and convert's
# speed relative to cp and to cp+sync. The fair baseline is cp+sync: convert
# returns only once its output is on disk, bare cp before.
set -eu
NIBBLE=${1:-build/release/nibble}
WORK=${2:-/tmp/nibble-convert-bench}
LAYERS=${3:-4}
RUNS=${4:-5}
HERE=$(dirname "$0")

rm -rf "$WORK"
mkdir -p "$WORK"
python3 "$HERE/make_synthetic_stock.py" "$WORK/src" --layers "$LAYERS"
BYTES=$(du -sb "$WORK/src" | cut -f1)

LOAD_BEFORE=$(uptime)
# run NAME COMMAND...: appends "wall cpu" to $WORK/NAME
run() {
  name=$1; shift
  rm -rf "$WORK/dst"
  cat "$WORK"/src/* > /dev/null  # SRC freshly read: cached and warm for every variant alike
  sync
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$@" > /dev/null
  awk '{print $1, $2 + $3}' "$WORK/time" >> "$WORK/$name"
}
variant() {
  case $1 in
    0) run cp cp -r "$WORK/src" "$WORK/dst" ;;
    1) run cpsync sh -c "cp -r '$WORK/src' '$WORK/dst' && sync '$WORK'/dst/* '$WORK/dst'" ;;
    2) run convert "$NIBBLE" convert "$WORK/src" "$WORK/dst" --to nvfp4 --quiet ;;
    3) run convert-j1 "$NIBBLE" convert "$WORK/src" "$WORK/dst" --to nvfp4 --quiet --jobs 1 ;;
  esac
}
for name in cp cpsync convert convert-j1; do : > "$WORK/$name"; done
i=0
while [ $i -lt "$RUNS" ]; do
  # The order rotates from run to run, so that no variant always follows
  # the same one (the removal of the previous output, page cache state).
  for k in 0 1 2 3; do variant $(((i + k) % 4)); done
  i=$((i + 1))
done
LOAD_AFTER=$(uptime)

# median COLUMN FILE
median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "bytes       $BYTES ($(echo "scale=2; $BYTES / 1000000000" | bc) GB, $(ls "$WORK"/src/*.safetensors | wc -l) shards), $RUNS runs each, medians"
echo "load before $LOAD_BEFORE"
echo "load after  $LOAD_AFTER"
for name in cp cpsync convert convert-j1; do
  w=$(median 1 "$WORK/$name"); c=$(median 2 "$WORK/$name")
  printf "%-11s %6.2f s  %5.0f MB/s  cpu %5.2f s   runs: %s\n" "$name" "$w" "$(echo "$BYTES / $w / 1000000" | bc -l)" "$c" \
    "$(cut -d' ' -f1 "$WORK/$name" | tr '\n' ' ')"
done
CP=$(median 1 "$WORK/cp"); CPS=$(median 1 "$WORK/cpsync")
for name in convert convert-j1; do
  CV=$(median 1 "$WORK/$name")
  printf "%-11s speed / cp speed %.2f   / cp+sync speed %.2f\n" "$name" "$(echo "$CP / $CV" | bc -l)" "$(echo "$CPS / $CV" | bc -l)"
done
rm -rf "$WORK"
