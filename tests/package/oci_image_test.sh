#!/bin/bash
# The OCI image of the Kubernetes manifests (packaging/oci/build-image.sh), built and checked
# without running a container: its config read back (skopeo inspect --config, umoci stat) and
# held to what the manifests rely on (entrypoint trainscope-sidecar, a non-root default user,
# PATH), then the image unpacked (umoci unpack) and its entrypoint run with chroot in that root:
# `trainscope-sidecar --check_config` must answer from inside, with a cluster spec written there,
# as the pods give it; trainscopectl --version and linear_regression --help too, as user 65532
# (the task's). Reuses the cached Debian root of the fresh-root test.
#
# Needs root, umoci, skopeo, debootstrap and the Debian archive; without one it is skipped (77;
# under CI=true it fails instead, as trainscope_testing.skips does).
# Usage: oci_image_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/packaging/debian-root.sh"  # debian_archive_reachable
skip() {
  if [ "${CI:-}" = true ]; then
    echo "FAILED oci_image: $* (CI=true: a suite that cannot run fails the run)"; exit 1
  fi
  echo "SKIPPED oci_image: $*"; exit 77
}
fail() { echo "oci_image: FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, umoci unpack)"
for tool in umoci skopeo debootstrap; do
  command -v $tool > /dev/null || skip "no $tool (scripts/install-deps installs it)"
done
debian_archive_reachable || skip "the Debian archive ($debian_mirror) cannot be reached"
ls "$build"/trainscope-sidecar_*.deb > /dev/null 2>&1 ||
  fail "no $build/trainscope-sidecar_*.deb: cmake --build build --target package"

work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-oci-test.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
t0=$SECONDS
oci=$work/oci tag=test
"$src/packaging/oci/build-image.sh" --tag $tag "$build" "$oci" 2>&1 | sed 's/^/  /' ||
  fail "build-image.sh"

echo "oci_image: the config (skopeo inspect --config oci:$oci:$tag)"
skopeo inspect --config "oci:$oci:$tag" > "$work/config.json"
skopeo inspect "oci:$oci:$tag" > "$work/inspect.json"
python3 - "$work/config.json" "$work/inspect.json" <<'PY' || fail "the image's config"
import json, sys
config = json.load(open(sys.argv[1]))
inspect = json.load(open(sys.argv[2]))
c = config["config"]
problems = []
def want(what, got, expected):
    if got != expected:
        problems.append(f"{what}: {got!r}, expected {expected!r}")
want("Entrypoint", c.get("Entrypoint"), ["/usr/bin/trainscope-sidecar"])
want("Cmd", c.get("Cmd"), None)
want("User", c.get("User"), "65534:65534")
env = dict(e.split("=", 1) for e in c.get("Env", []))
if "/usr/local/bin" not in env.get("PATH", "").split(":"):
    problems.append(f"PATH {env.get('PATH')!r} lacks /usr/local/bin (linear_regression)")
want("os", config.get("os"), "linux")
want("layers", len(inspect.get("Layers", [])), 1)
labels = c.get("Labels") or {}
print(f"  entrypoint {c.get('Entrypoint')}, user {c.get('User')}, "
      f"version {labels.get('org.opencontainers.image.version')}, {config.get('os')}/"
      f"{config.get('architecture')}, {len(inspect.get('Layers', []))} layer")
for p in problems:
    print("  config:", p)
sys.exit(1 if problems else 0)
PY

umoci stat --image "$oci:$tag" | sed 's/^/  /'
blobs=$(du -sm "$oci/blobs" | cut -f1)

echo "oci_image: unpacked (umoci unpack), the entrypoint run with chroot"
umoci unpack --image "$oci:$tag" "$work/bundle" > /dev/null
rootfs=$work/bundle/rootfs
unpacked=$(du -sm --one-file-system "$rootfs" | cut -f1)
entrypoint=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["Entrypoint"][0])' \
  "$work/config.json")
# The spec as the pods give it: TF_CONFIG built from the ConfigMap, plus --local_tasks.
cluster='{"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "10.0.0.2:2222"]}'
mkdir -p "$rootfs/etc/trainscope"
echo "{\"cluster\": $cluster}" > "$rootfs/etc/trainscope/cluster_spec.json"
out=$(chroot --userspec=0:0 "$rootfs" "$entrypoint" --check_config \
  --cluster_spec /etc/trainscope/cluster_spec.json --cluster_name image-check \
  --local_tasks ps:0 --http_address 0.0.0.0 2>&1) || fail "--check_config: $out"
echo "  $entrypoint --check_config: $out"
grep -q "is valid: 3 tasks; cluster image-check" <<<"$out" || fail "unexpected --check_config answer"
grep -q "watches ps:0@127.0.0.1:2222" <<<"$out" || fail "--check_config does not watch ps:0"
# The sidecar's container: TF_CONFIG and the cluster name in its environment (downward API).
out=$(TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 1}}" \
  TRAINSCOPE_CLUSTER=mnist chroot --userspec=0:0 "$rootfs" "$entrypoint" --check_config \
  --local_tasks worker:1 --http_address 0.0.0.0 2>&1) || fail "--check_config from TF_CONFIG: $out"
echo "  with TF_CONFIG and TRAINSCOPE_CLUSTER: $out"
grep -q "cluster mnist; .* watches worker:1@10.0.0.2:2222" <<<"$out" ||
  fail "unexpected --check_config answer from TF_CONFIG"
bad=$(chroot "$rootfs" "$entrypoint" --check_config --cluster_spec /nonexistent 2>&1) &&
  fail "--check_config accepted a missing spec: $bad"
echo "  a missing spec: $bad"
ctl=$(chroot --userspec=65532:65532 "$rootfs" /usr/bin/trainscopectl --version 2>&1) ||
  fail "trainscopectl --version: $ctl"
echo "  trainscopectl --version (as 65532): $ctl"
if [ -x "$rootfs/usr/local/bin/linear_regression" ]; then
  chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/linear_regression --help > "$work/lr.txt" 2>&1 ||
    fail "linear_regression --help: $(tail -n 3 "$work/lr.txt")"
  echo "  linear_regression --help (as 65532): $(head -n 1 "$work/lr.txt")"
fi
pkg=$(chroot "$rootfs" dpkg-query -W -f '${Package} ${Version}' trainscope-sidecar)
echo "  installed: $pkg"
echo "oci_image: passed in $((SECONDS - t0)) s: image $blobs MiB compressed, $unpacked MiB unpacked"
