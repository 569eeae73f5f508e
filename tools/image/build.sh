#!/usr/bin/env bash
# Builds the project's Dockerfile with buildah (no Docker engine): chroot isolation, the host's
# network (pip reaches PyPI), vfs storage in the project cache, every step's layer kept
# (--layers) so the next build reruns only the steps whose input changed.
#   tools/image/build.sh IMAGE BASE_IMAGE
# BASE_IMAGE (tools/image/base.sh) is the Dockerfile's PYTHON_IMAGE. Run from the repository root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/common.sh"
image="$1"
base_image="$2"
mkdir -p "$CONTAINERS_DIR/stamps"
log="$CONTAINERS_DIR/last-build.log"

# Nothing to do when the build's inputs (the files the Dockerfile copies, the Dockerfile, the base)
# are byte for byte those of the image we have: buildah would find every step cached, but only
# after creating and removing a full vfs copy of each stage (about 30 s).
sources=()
for path in Dockerfile .dockerignore pyproject.toml README.md operator; do
  [ -e "$path" ] && sources+=("$path")
done
inputs="$(
  {
    "${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$base_image"
    find "${sources[@]}" -name __pycache__ -prune -o -type f -printf '%p %m\n' | LC_ALL=C sort
    find "${sources[@]}" -name __pycache__ -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 cat
  } | sha256sum | cut -d' ' -f1
)"
stamp="$CONTAINERS_DIR/stamps/$(printf '%s' "$image" | tr '/:' '__')"
current="$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$image" 2>/dev/null || true)"
if [ -n "$current" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs $current" ]; then
  say "$image is up to date (${current:0:12}: same Dockerfile, source and base)"
  exit 0
fi

pip_cache="${PIP_CACHE_DIR:-$GROUPOPS_CACHE/pip}"
mkdir -p "$pip_cache"
mounts=(--volume "$pip_cache:/root/.cache/pip")
# pip in the build trusts what this machine trusts: its CA bundle (which holds the CA of a
# TLS-inspecting proxy, where there is one) over the base's, and an /etc/pip.conf naming it.
# Bind mounts for the RUN steps only: they reach no layer of the runtime stage, which has no RUN.
ca_bundle="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
if [ -s "$ca_bundle" ]; then
  pip_conf="$CONTAINERS_DIR/pip.conf"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$pip_conf"
  mounts+=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" --volume "$pip_conf:/etc/pip.conf:ro")
fi

say "building $image from Dockerfile on $base_image (layers cached in $CONTAINERS_DIR, log $log)"
started=$SECONDS
# The steps as they run (cached or not); the whole output goes to the log.
if ! "${BUILDAH[@]}" bud --isolation chroot --layers "${mounts[@]}" \
  --build-arg PYTHON_IMAGE="$base_image" --tag "$image" --file Dockerfile . 2>&1 |
  tee "$log" | { grep --line-buffered -E '^\[[0-9]+/[0-9]+\] STEP|^--> Using cache' || true; } |
  cut -c1-110 >&2; then
  say "buildah bud failed: the last lines of $log"
  tail -n 30 "$log" >&2
  exit 1
fi
say "built $image in $((SECONDS - started)) s"

# Each stage's last step has no name and no child, so a prune would drop it and the next build
# would rerun it: name it (the build stage's `pip install`, the account stage's `useradd`).
declare -A last_step=()
stage=""
while read -r line; do
  if [[ "$line" =~ ^\[([0-9]+)/[0-9]+\]\ STEP ]]; then
    stage="${BASH_REMATCH[1]}"
  elif [[ -n "$stage" && "$line" =~ ^--\>\ ([0-9a-f]{11,64})$ ]]; then
    last_step[$stage]="${BASH_REMATCH[1]}"
  fi
done <"$log"
for stage in "${!last_step[@]}"; do
  if [ "$stage" != "$(printf '%s\n' "${!last_step[@]}" | sort -n | tail -n 1)" ]; then
    "${BUILDAH[@]}" tag "${last_step[$stage]}" "$image-stage$stage"
  fi
done
# Every rebuild leaves the previous image and its steps without a name; vfs keeps a full copy of
# the root filesystem per layer, so drop them: a prune removes the images with no name and no
# child, so repeat it while that frees more. Steps below a named image stay cached.
before=-1
while dangling="$("${BUILDAH[@]}" images --quiet --filter dangling=true | wc -l)" &&
  [ "$dangling" -gt 0 ] && [ "$dangling" -ne "$before" ]; do
  before="$dangling"
  "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
done

current="$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$image")"
printf '%s %s\n' "$inputs" "$current" >"$stamp"
say "$image is ${current:0:12}: user $("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$image"), $(du -sh "$CONTAINERS_DIR" | cut -f1) in $CONTAINERS_DIR"
