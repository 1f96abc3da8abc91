#!/bin/bash
# A minimal Debian 12 root (debootstrap --variant=minbase), made once and cached as a tarball
# outside the clone; later callers start from a copy of it. Shared by the fresh-root package test
# (tests/package/fresh_root_test.sh) and the OCI image (packaging/oci/build-image.sh).
#
# Source it, then: debian_root_tarball WORK_DIR   prints the tarball's path (making it if missing;
#                                                  debootstrap's log in WORK_DIR on failure)
#                  debian_root_sources ROOT        writes a fresh machine's apt sources there
# Settings: TRAINSCOPE_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#           TRAINSCOPE_ROOT_CACHE (default /var/cache/trainscope-test). Needs root, debootstrap
#           and the archive when the tarball is not cached yet.

debian_mirror=${TRAINSCOPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
debian_root_cache=${TRAINSCOPE_ROOT_CACHE:-/var/cache/trainscope-test}

debian_root_tarball() {
  local work=$1
  local tarball
  tarball=$debian_root_cache/bookworm-minbase-$(dpkg-query -W -f '${Version}' debootstrap).tar
  if [ ! -f "$tarball" ]; then
    echo "making a minimal Debian 12 root (debootstrap, cached in $tarball)" >&2
    mkdir -p "$debian_root_cache"
    debootstrap --variant=minbase bookworm "$work/new" "$debian_mirror" > "$work/debootstrap.log" 2>&1 ||
      { tail -n 20 "$work/debootstrap.log" >&2; echo "debootstrap failed" >&2; return 1; }
    tar -C "$work/new" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf --one-file-system "$work/new"
  fi
  echo "$tarball"
}

# What a fresh Debian 12 machine has: the release, its updates and security archives.
debian_root_sources() {
  cat > "$1/etc/apt/sources.list" <<SOURCES
deb $debian_mirror bookworm main
deb $debian_mirror bookworm-updates main
deb ${debian_mirror%/debian}/debian-security bookworm-security main
SOURCES
}

# The archive's host answers on port 80 (within 10 s).
debian_archive_reachable() {
  local host
  host=$(sed -E 's|^[a-z]+://([^/:]+).*|\1|' <<<"$debian_mirror")
  timeout 10 bash -c "exec 3<>/dev/tcp/$host/80" 2> /dev/null
}
