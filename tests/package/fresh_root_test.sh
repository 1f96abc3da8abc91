#!/bin/bash
# The packages on a fresh system: a minimal Debian 12 root (debootstrap --variant=minbase),
# `apt-get install ./*.deb` there (apt resolves every dependency the packages declare), then
# inside it: trainscopectl --version, and train_watched.sh: fit_line (examples/out_of_tree)
# built against libtrainscope-dev and trained with the sidecar started as its systemd unit
# would start it (its ExecStart and /etc/default/trainscope-sidecar, as an unprivileged user
# with the unit's capabilities only, as DynamicUser= and AmbientCapabilities= give it), and
# `systemd-analyze security` of the installed unit (unit_security.sh).
#
# The root is made once (packaging/debian-root.sh, shared with the OCI image) and cached outside
# the clone ($TRAINSCOPE_ROOT_CACHE, default
# /var/cache/trainscope-test), so a later run starts from a copy of it. Needs root and the
# Debian archive; without either it is skipped (exit 77) with one line saying why. Mounts live
# in a mount namespace of its own (unshare -m): nothing stays mounted when it ends.
# Usage: fresh_root_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/packaging/debian-root.sh"  # debian_root_tarball, debian_root_sources
skip() {
  if [ "${CI:-}" = true ]; then
    echo "FAILED fresh_root: $* (CI=true: a suite that cannot run fails the run)"; exit 1
  fi
  echo "fresh_root: skipped: $*"; exit 77
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap > /dev/null || skip "no debootstrap (scripts/install-deps installs it)"
debian_archive_reachable || skip "the Debian archive ($debian_mirror) cannot be reached"
debs=("$build"/trainscope-sidecar_*.deb "$build"/libtrainscope-dev_*.deb)
for d in "${debs[@]}"; do
  [ -f "$d" ] || { echo "fresh_root: FAILED: $d missing: cmake --build build --target package"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-root.XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
root=$work/root
t0=$SECONDS
tarball=$(debian_root_tarball "$work") || { echo "fresh_root: FAILED: debootstrap"; exit 1; }
mkdir "$root"
tar -C "$root" -xf "$tarball"
echo "fresh_root: fresh root ready in $((SECONDS - t0)) s"
debian_root_sources "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/tmp/debs" "$root/tmp/src"
cp "${debs[@]}" "$root/tmp/debs/"
cp -r "$src/examples/out_of_tree" "$root/tmp/src/out_of_tree"
cp "$src/tests/package/train_watched.sh" "$root/tmp/src/"

cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
apt_get() { apt-get -q -o Dpkg::Use-Pty=0 "$@"; }
echo "fresh_root: apt-get install ./trainscope-sidecar_*.deb ./libtrainscope-dev_*.deb"
apt_get update > /tmp/apt.log 2>&1 || { tail /tmp/apt.log; exit 1; }
(cd /tmp/debs && apt_get install -y ./*.deb) >> /tmp/apt.log 2>&1 || { tail -n 30 /tmp/apt.log; exit 1; }
grep -E "newly installed" /tmp/apt.log | sed 's/^/  /'
echo "fresh_root: apt-get install cmake g++ make (to build a program of one's own)"
apt_get install -y --no-install-recommends cmake g++ make >> /tmp/apt.log 2>&1 || { tail -n 30 /tmp/apt.log; exit 1; }
echo "fresh_root: trainscopectl --version: $(trainscopectl --version)"
echo "fresh_root: trainscope-sidecar --version: $(trainscope-sidecar --version)"
systemd_unit=/lib/systemd/system/trainscope-sidecar.service
[ -f "$systemd_unit" ] && [ -f /etc/default/trainscope-sidecar ]
# DynamicUser=yes with the unit's AmbientCapabilities= and CapabilityBoundingSet=, as setpriv
# can give them here (the capabilities read from the unit file).
caps=$(sed -n 's/^AmbientCapabilities=//p' /lib/systemd/system/trainscope-sidecar.service |
  tr 'A-Z ' 'a-z\n' | sed 's/^cap_/+/' | paste -sd, -)
/tmp/src/train_watched.sh /tmp/src/out_of_tree /tmp/work \
  setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all,$caps \
  --ambient-caps=-all,$caps --bounding-set=-all,$caps unit
INSIDE
echo "fresh_root: inside the root"
unshare -m --propagation private bash -c '
  set -e
  root=$1
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind /var/cache/apt/archives "$root/var/cache/apt/archives"  # packages already fetched
  exec chroot "$root" /bin/bash -s' _ "$root" < "$work/inside.sh"
# The installed unit's exposure (systemd-analyze of this machine, on the root's unit files).
"$src/tests/package/unit_security.sh" --root "$root" || [ $? = 77 ]
echo "fresh_root: passed in $((SECONDS - t0)) s"
