#!/usr/bin/env bash
# Usage: fetch.sh DEBIAN_VERSION DEST: put Debian's prometheus and promtool binaries into DEST.
set -euo pipefail
version=$1
dest=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download "prometheus=$version" >download.log 2>&1; then
  # The package lists may be missing or old on a fresh machine: refresh them once (needs root).
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >>download.log 2>&1 || true; fi
  apt-get download "prometheus=$version" >>download.log 2>&1 ||
    # Debian replaces a stable package on a security update: take the archive's current one.
    { echo "fetch.sh: prometheus $version is not in the archive any more; taking its current one" >&2
      apt-get download prometheus >>download.log 2>&1; } || {
      cat download.log >&2
      echo "fetch.sh: cannot download Debian's prometheus (apt-get download)" >&2
      exit 1
    }
fi
dpkg-deb -x prometheus_*.deb unpacked
mkdir -p "$dest"
install -m 0755 unpacked/usr/bin/prometheus unpacked/usr/bin/promtool "$dest/"
"$dest/promtool" --version | head -1
