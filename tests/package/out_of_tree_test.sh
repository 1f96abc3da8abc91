#!/bin/bash
# A training program outside the tree, built against `cmake --install` of this build (the
# dev component, into a temporary prefix) and trained with the sidecar watching
# (train_watched.sh). No root, no network.
# Usage: out_of_tree_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-oot.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" --component dev --strip > "$work/install.log"
echo "out_of_tree: installed the dev component into $work/prefix ($(du -sh "$work/prefix" | cut -f1))"
PATH=$build/bin:$PATH CMAKE_PREFIX_PATH=$work/prefix \
  "$src/tests/package/train_watched.sh" "$src/examples/out_of_tree" "$work/run" \
  "$build/bin/trainscope-sidecar"
