#!/usr/bin/env bash
# bench_startup.sh: how long a command takes to start, and its peak memory:
# `iabn version` and `iabn train --help` (parse only), N runs each; prints the
# median wall time and the largest max RSS, and with --out FILE.md appends
# them to a results file (bench/results/).  /bin/true is the machine's own
# floor (process creation on a loaded machine).  Target (issue 18): under 50 ms and
# 30 MB on a CPU machine.  Needs GNU time (/usr/bin/time) for the RSS.
#   tools/bench_startup.sh [RUNS] [--out bench/results/DATE-startup.md]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
out=${3:-}
[ "${2:-}" = "--out" ] || out=""
iabn=${IABN:-build/tools/iabn}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
measure() { # label, command...
  local label=$1; shift
  local times=() rss=0
  for _ in $(seq "$runs"); do
    local t0 t1 r
    t0=$(date +%s%N)
    if [ -x /usr/bin/time ]; then
      /usr/bin/time -o "$tmp" -f '%M' "$@" >/dev/null 2>&1 || true
      r=$(tail -1 "$tmp")
    else
      "$@" >/dev/null 2>&1; r=0
    fi
    t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
    [ "$r" -gt "$rss" ] && rss=$r
  done
  local med
  med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '| %-22s | %8.1f | %8.1f |\n' "$label" "$(echo "$med / 1000" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
}
{
  echo "## Startup ($(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $runs runs, $($iabn version 2>/dev/null | head -1))"
  echo
  echo "| command | median ms | max RSS MiB |"
  echo "|---|---|---|"
  measure "/bin/true (the machine)" /bin/true
  measure "iabn version" "$iabn" version
  measure "iabn train --help" "$iabn" train --help
  measure "iabn completion bash" "$iabn" completion bash
} | tee ${out:+-a "$out"}
