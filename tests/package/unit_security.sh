#!/bin/bash
# The exposure score `systemd-analyze security` gives the sidecar's unit, printed and held to a
# bound: at most 3.9 ("OK"; the unit scores 2.3, docs/security.md). Offline: on a unit file
# (UNIT), or with ROOT on the unit installed in that root (the fresh-root test's).
# Usage: unit_security.sh UNIT_FILE | unit_security.sh --root ROOT
# Skipped (77) without systemd-analyze 250+ (--offline).
set -euo pipefail
bound=3.9
skip() {
  if [ "${CI:-}" = true ]; then
    echo "FAILED unit_security: $* (CI=true: a suite that cannot run fails the run)"; exit 1
  fi
  echo "unit_security: skipped: $*"; exit 77
}
command -v systemd-analyze > /dev/null || skip "no systemd-analyze (scripts/install-deps installs systemd)"
if [ "$1" = --root ]; then
  out=$(systemd-analyze security --offline=true --root="$2" trainscope-sidecar.service 2>&1) || true
else
  dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
  cp "$1" "$dir/trainscope-sidecar.service"
  out=$(cd "$dir" && systemd-analyze security --offline=true trainscope-sidecar.service 2>&1) || true
fi
line=$(grep -m1 "Overall exposure level" <<< "$out") || {
  grep -q "unrecognized option\|unknown option" <<< "$out" &&
    skip "systemd-analyze has no --offline"
  echo "unit_security: FAILED: no score: $out"; exit 1; }
score=$(sed -E 's/.*: ([0-9.]+) .*/\1/' <<< "$line")
echo "unit_security: ${line#→ }"
awk -v s="$score" -v b="$bound" 'BEGIN { exit !(s <= b) }' ||
  { echo "unit_security: FAILED: exposure $score above $bound; what it asks for:";
    grep "✗" <<< "$out"; exit 1; }
