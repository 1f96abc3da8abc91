#!/usr/bin/env bash
# What telemetry costs in instructions, which a busy machine cannot blur: callgrind counts every
# instruction of telemetry_bench's --profile mode (worker and ps in one process, Pull+Push of a
# 4 KiB variable, spans exported to an in-process collector) at two round-trip counts; the
# difference over the difference in round trips is one round trip's cost, without the set-up.
#   tests/bench/callgrind_overhead.sh [build/bin] [N1 N2]        (needs valgrind; ~5 min)
# Caveat: under valgrind a round trip takes ~50x longer, so work done per unit of time (the
# exporter's batches, the sampler's wake-ups every 50 ms) counts ~50x more per round trip than
# it does at full speed: the "default" row is an upper bound.
set -euo pipefail
bin=${1:-build/bin}
n1=${2:-1000}
n2=${3:-3000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
total() {  # instructions of one run: total PROFILE ROUND_TRIPS [env VAR=... -u VAR]
  local profile=$1 n=$2
  shift 2
  "$@" valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin/telemetry_bench" \
    --profile "$profile" "$n" >/dev/null 2>&1
  callgrind_annotate "$out/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
declare -A per
for mode in off metrics default always_on; do
  case $mode in
    off | metrics) profile=$mode env=(env -u OTEL_TRACES_SAMPLER) ;;
    default) profile=on env=(env -u OTEL_TRACES_SAMPLER) ;;
    always_on) profile=on env=(env OTEL_TRACES_SAMPLER=always_on) ;;
  esac
  a=$(total "$profile" "$n1" "${env[@]}")
  b=$(total "$profile" "$n2" "${env[@]}")
  per[$mode]=$(((b - a) / (n2 - n1)))
  printf '%-10s %9d instructions per round trip\n' "$mode" "${per[$mode]}"
done
for mode in metrics default always_on; do
  awk -v m="$mode" -v a="${per[$mode]}" -v o="${per[off]}" \
    'BEGIN { printf "%-10s / off: %.3f\n", m, a / o }'
done
