#!/usr/bin/env bash
# Installs buildah (builds and runs OCI images with no daemon) and mmdebstrap (the base rootfs from
# Debian packages) with apt-get when either is missing. Idempotent: a no-op when both are there.
set -euo pipefail
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
printf '== image: installing %s with apt-get\n' "${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
