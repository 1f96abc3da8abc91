#!/usr/bin/env bash
# The long fuzzing run recorded in docs/fuzzing.md: each target in turn (one process, one job:
# the machine is shared) until 10 million executions or <seconds>, whichever comes first,
# starting from a copy of its committed corpus. Logs and grown corpora go under <out dir>;
# crashing inputs under <out dir>/artifacts. Prints one summary line per target.
#   long_run.sh <build dir> <seconds per target> <out dir> [target...]
set -euo pipefail
build=$1 seconds=$2 out=$3
shift 3
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tf_config traceparent heartbeat otlp_export exchange)
corpus_root=$(cd "$(dirname "$0")" && pwd)/corpus
mkdir -p "$out/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  cp -r "$corpus_root/$t/." "$out/corpus/$t/"
  start=$(date +%s)
  rc=0
  "$build/bin/fuzz_$t" -runs=10000000 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" "$out/corpus/$t" \
    >"$out/$t.log" 2>&1 || rc=$?
  end=$(date +%s)
  last=$(grep -E '^#[0-9]+' "$out/$t.log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: //p' "$out/$t.log")
  echo "$t: exit $rc, ${execs:-?} executions in $((end - start)) s; last: $last"
done
