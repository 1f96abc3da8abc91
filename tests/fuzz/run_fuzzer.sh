#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a copy of its committed seed corpus (so the
# repo is never written), as the ctest of label `fuzz` does; fails on any crash, leak, timeout or
# out-of-memory. The committed corpus holds the regression inputs too: libFuzzer runs every one
# of them first. A crashing input is kept under <artifacts dir> for the report.
#   run_fuzzer.sh <fuzzer binary> <corpus dir> <seconds> <artifacts dir>
set -euo pipefail
fuzzer=$1 corpus=$2 seconds=$3 artifacts=$4

work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$corpus/." "$work/"
mkdir -p "$artifacts"
# One process, one job: the machine is shared. -timeout: an input slower than this is a hang.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$(basename "$fuzzer")-" "$work"
