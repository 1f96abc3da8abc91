#!/bin/bash
# The OCI image the Kubernetes manifests use (examples/kubernetes/), built from the Debian
# packages without running a container: a minimal Debian 12 root (packaging/debian-root.sh,
# cached), `apt-get install ./trainscope-sidecar_*.deb` in it (apt resolves the dependencies the
# package declares), and the example training program linear_regression from the build (it needs
# only libraries the sidecar's package already brings); then umoci makes an OCI image layout of
# that root: one layer, entrypoint /usr/bin/trainscope-sidecar, user nobody (65534: the manifests
# run the sidecar as 0 with three capabilities, the task as non-root).
#
# Usage: build-image.sh [--tag TAG] [--no-example] BUILD_DIR OCI_DIR
#   BUILD_DIR  holds trainscope-sidecar_*.deb (cmake --build build --target package) and, unless
#              --no-example, bin/linear_regression
#   OCI_DIR    the OCI image layout to write (replaced if it exists); the image is tagged TAG
#              (default: the package's version, e.g. 0.1.0)
# Then, to push it (docs/sidecar.md, "Kubernetes"):
#   skopeo copy oci:OCI_DIR:TAG docker://REGISTRY/trainscope:TAG
#
# Needs root (debootstrap, chroot, umoci unpack), umoci, debootstrap, and Debian's archive
# (TRAINSCOPE_DEBIAN_MIRROR) for the dependencies; packages already fetched are taken from
# /var/cache/apt/archives. Mounts live in a mount namespace of its own (unshare -m).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../debian-root.sh"  # debian_root_tarball, debian_root_sources

tag="" example=1
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --no-example) example=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build-image: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || { echo "usage: build-image.sh [--tag TAG] [--no-example] BUILD_DIR OCI_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
oci=$2
say() { echo "build-image: $*"; }
fail() { echo "build-image: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, umoci unpack)"
for tool in umoci debootstrap; do
  command -v $tool > /dev/null || fail "no $tool (scripts/install-deps installs it)"
done
debs=("$build"/trainscope-sidecar_*.deb)
[ -f "${debs[0]}" ] || fail "no $build/trainscope-sidecar_*.deb: cmake --build build --target package"
[ ${#debs[@]} -eq 1 ] || fail "more than one trainscope-sidecar package in $build: ${debs[*]}"
version=$(dpkg-deb -f "${debs[0]}" Version)
arch=$(dpkg-deb -f "${debs[0]}" Architecture)
[ -n "$tag" ] || tag=${version%-*}
example_note=""
if [ $example = 1 ]; then
  example_note=" + linear_regression"
  [ -x "$build/bin/linear_regression" ] ||
    fail "no $build/bin/linear_regression (cmake --build build --target linear_regression; or --no-example)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-oci.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
root=$work/root
t0=$SECONDS
tarball=$(debian_root_tarball "$work") || fail "debootstrap"
mkdir "$root"
tar -C "$root" -xf "$tarball"
debian_root_sources "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/tmp/debs"
cp "${debs[@]}" "$root/tmp/debs/"
if [ $example = 1 ]; then
  # The example's debug info stays in the build (objcopy: 69 MB -> a few).
  objcopy --strip-debug "$build/bin/linear_regression" "$root/usr/local/bin/linear_regression"
fi

say "apt-get install ./$(basename "${debs[0]}") in a Debian 12 root"
cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
apt_get() { apt-get -q -o Dpkg::Use-Pty=0 "$@"; }
apt_get update > /tmp/apt.log 2>&1 || { tail /tmp/apt.log; exit 1; }
(cd /tmp/debs && apt_get install -y --no-install-recommends ./*.deb) >> /tmp/apt.log 2>&1 ||
  { tail -n 30 /tmp/apt.log; exit 1; }
# A library the example needs that the package did not bring would be a packaging bug.
if [ -x /usr/local/bin/linear_regression ] && ldd /usr/local/bin/linear_regression | grep 'not found'; then
  echo "linear_regression needs libraries the package does not bring"; exit 1
fi
apt_get clean
INSIDE
unshare -m --propagation private bash -c '
  set -e
  root=$1
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mkdir -p /var/cache/apt/archives
  mount --bind /var/cache/apt/archives "$root/var/cache/apt/archives"  # packages already fetched
  exec chroot "$root" /bin/bash -s' _ "$root" < "$work/inside.sh" ||
  fail "apt-get install in the root"
# What an image does not need: apt's lists, logs, docs (copyright files stay), man pages, the
# .deb files; resolv.conf and hostname come from the runtime.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/tmp/* \
  "$root"/var/cache/debconf/*-old "$root"/root/.bash_history
find "$root/usr/share/doc" -type f ! -name copyright -delete
find "$root/usr/share/doc" -type l -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
: > "$root/etc/resolv.conf"
: > "$root/etc/hostname"
say "root ready in $((SECONDS - t0)) s: $(du -sm --one-file-system "$root" | cut -f1) MiB"

say "umoci: OCI layout $oci, tag $tag"
rm -rf "$oci"
umoci init --layout "$oci"
umoci new --image "$oci:$tag"
umoci unpack --image "$oci:$tag" "$work/bundle" > /dev/null
tar -C "$root" --xattrs --numeric-owner -cf - . | tar -C "$work/bundle/rootfs" --xattrs --numeric-owner -xf -
umoci repack --image "$oci:$tag" --history.created_by "packaging/oci/build-image.sh: Debian 12 minbase + $(basename "${debs[0]}")$example_note" \
  "$work/bundle"
created=$(date -u -d "@$(stat -c %Y "${debs[0]}")" +%Y-%m-%dT%H:%M:%SZ)
umoci config --image "$oci:$tag" \
  --config.entrypoint /usr/bin/trainscope-sidecar \
  --clear config.cmd \
  --config.user 65534:65534 \
  --config.workingdir / \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env LC_ALL=C.UTF-8 \
  --config.exposedports 9400/tcp --config.exposedports 4317/tcp \
  --config.label org.opencontainers.image.title=trainscope \
  --config.label org.opencontainers.image.version="$version" \
  --config.label org.opencontainers.image.description="trainscope-sidecar $version (Debian 12)$example_note" \
  --config.label org.opencontainers.image.base.name=debian:bookworm \
  --architecture "$arch" --os linux --created "$created" \
  --history.created_by "umoci config: entrypoint trainscope-sidecar, user nobody"
umoci gc --layout "$oci"
say "done in $((SECONDS - t0)) s: $oci:$tag, $(du -sm "$oci" | cut -f1) MiB (compressed)"
say "push: skopeo copy oci:$oci:$tag docker://REGISTRY/trainscope:$tag"
