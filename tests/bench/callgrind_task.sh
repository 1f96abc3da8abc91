#!/usr/bin/env bash
# What telemetry costs one real task, in instructions: callgrind counts every instruction of a
# linear_regression ps (or worker) training against a native worker (or ps), with the node's
# sidecar receiving their spans, for two step counts; (difference in instructions) / (difference
# in steps) is one step's cost without start-up. Set-ups: off (--disable_telemetry), metrics
# (--disable_tracing), default (as shipped). Needs valgrind; ~4 min for the defaults.
#   tests/bench/callgrind_task.sh [build/bin] [ps|worker] [STEPS1 STEPS2]
# Caveat: the task under valgrind runs ~50x slower, so per-time work (the tail sampler's passes,
# export batches, the slowest-per-window spans) counts more per step than at full speed, and its
# calls are slower, so more of them cross the slow threshold and are kept: an upper bound.
set -euo pipefail
bin=$(cd "${1:-build/bin}" && pwd)
who=${2:-ps}
n1=${3:-2000}
n2=${4:-6000}
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$out"' EXIT
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Instructions of the profiled task over one run: run MODE STEPS
run() {
  local mode=$1 steps=$2 flags=() ps worker http grpc spec sidecar profiled
  case $mode in
    off) flags=(--disable_telemetry) ;;
    metrics) flags=(--disable_tracing) ;;
  esac
  ps=127.0.0.1:$(port) worker=127.0.0.1:$(port) http=$(port) grpc=$(port)
  spec="{\"cluster\":{\"ps\":[\"$ps\"],\"worker\":[\"$worker\"]}"
  echo "$spec}" >"$out/spec.json"
  "$bin/trainscope-sidecar" --cluster_spec "$out/spec.json" --http_address 127.0.0.1 \
    --http_port "$http" --grpc_port "$grpc" --peer_sidecars none >"$out/sidecar.log" 2>&1 &
  sidecar=$!
  pids=("$sidecar")
  local vg=(valgrind --tool=callgrind --callgrind-out-file="$out/cg")
  local ps_cmd=("$bin/linear_regression" --metrics_port 0 "${flags[@]}")
  local worker_cmd=("$bin/linear_regression" --metrics_port 0 --steps "$steps"
    --log_every 1000000 "${flags[@]}")
  [ "$who" = ps ] && ps_cmd=("${vg[@]}" "${ps_cmd[@]}") || worker_cmd=("${vg[@]}" "${worker_cmd[@]}")
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$grpc
  TF_CONFIG="$spec,\"task\":{\"type\":\"ps\",\"index\":0}}" "${ps_cmd[@]}" >"$out/ps.log" 2>&1 &
  profiled=$!
  pids+=("$profiled")
  TF_CONFIG="$spec,\"task\":{\"type\":\"worker\",\"index\":0}}" "${worker_cmd[@]}" \
    >"$out/worker.log" 2>&1
  wait "$profiled"  # the ps ends when its worker is done
  kill "$sidecar"
  wait "$sidecar" || true
  callgrind_annotate "$out/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

declare -A per
for mode in off metrics default; do
  a=$(run "$mode" "$n1")
  b=$(run "$mode" "$n2")
  per[$mode]=$(((b - a) / (n2 - n1)))
  printf '%-8s %9d instructions per step in the %s\n' "$mode" "${per[$mode]}" "$who"
done
for mode in metrics default; do
  awk -v m="$mode" -v a="${per[$mode]}" -v o="${per[off]}" 'BEGIN {printf "%-8s / off: %.3f\n", m, a / o}'
done
