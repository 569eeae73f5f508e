#!/usr/bin/env bash
# The image's base, made from Debian packages (no registry image needed): mmdebstrap writes a
# minimal bookworm root filesystem with python3 (3.11), python3-venv and ca-certificates, and
# buildah turns it into the local image BASE_IMAGE in the cached storage.
#   tools/image/base.sh BASE_IMAGE WORKDIR
# WORKDIR keeps the rootfs tarball; both steps are skipped when their result exists.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/common.sh"
base_image="$1"
workdir="$2"
tarball="$workdir/rootfs.tar"
mkdir -p "$workdir"

if [ ! -s "$tarball" ]; then
  say "building the bookworm rootfs with mmdebstrap into $tarball (a minute or two)"
  # minbase: Essential packages and apt; docs, man pages and locales are left out of the image.
  mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
    --include=python3,python3-venv,ca-certificates,passwd \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$tarball.part" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  mv "$tarball.part" "$tarball"
fi

if "${BUILDAH[@]}" inspect --type image "$base_image" >/dev/null 2>&1; then
  say "base image $base_image is cached"
  exit 0
fi
say "importing $tarball as $base_image"
container="$("${BUILDAH[@]}" from scratch)"
trap '"${BUILDAH[@]}" rm "$container" >/dev/null 2>&1 || true' EXIT
mountpoint="$("${BUILDAH[@]}" mount "$container")"
tar -C "$mountpoint" --numeric-owner -xpf "$tarball"
"${BUILDAH[@]}" umount "$container" >/dev/null
"${BUILDAH[@]}" config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 \
  --cmd /bin/bash \
  --label org.opencontainers.image.description="Debian bookworm, python3 3.11, python3-venv (mmdebstrap)" \
  "$container"
"${BUILDAH[@]}" commit --quiet "$container" "$base_image" >/dev/null
say "base image $base_image ready"
