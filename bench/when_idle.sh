#!/bin/sh
# Runs a command once the machine is idle: nothing else runnable in 10
# samples 0.5 s apart, a short blip costing 3 of them (/proc/stat
# procs_running counts this script's own sampler as 1). On a shared 2-core machine a compute-bound
# kernel loses half its speed to one busy neighbour while the paired
# bandwidth probe (memory-bound) barely does, so ratios measured under load
# understate the kernels. Gives up after MAX_WAIT seconds (default 3600).
# Usage: bench/when_idle.sh COMMAND...
MAX_WAIT=${MAX_WAIT:-3600}
start=$(date +%s)
quiet=0
while [ "$quiet" -lt 10 ]; do
  running=$(awk '/^procs_running/ {print $2}' /proc/stat)
  if [ "$running" -le 1 ]; then quiet=$((quiet + 1)); else quiet=$((quiet > 3 ? quiet - 3 : 0)); fi
  if [ $(($(date +%s) - start)) -gt "$MAX_WAIT" ]; then
    echo "when_idle: the machine was never idle for 5 s in ${MAX_WAIT} s" >&2
    exit 2
  fi
  sleep 0.5
done
echo "when_idle: idle at $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec "$@"
