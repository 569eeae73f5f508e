#!/usr/bin/env bash
# Build the local stack's kube-apiserver and etcd from their Go modules into OUT_DIR.
# Usage: tools/k8s/build.sh OUT_DIR K8S_VERSION
# Caches: GOMODCACHE and GOCACHE under $GROUPOPS_CACHE/go (the project owns them, CI can keep them).
# -p 2: the machine is shared; the build is slow but runs once per version.
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR K8S_VERSION}
k8s_version=${2:?usage: build.sh OUT_DIR K8S_VERSION}
here=$(cd "$(dirname "$0")" && pwd)
cache=${GROUPOPS_CACHE:-$HOME/.cache/groupops}
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/cache GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
mkdir -p "$out"
minor=$(echo "$k8s_version" | cut -d. -f2)
# The release's commit and tag time, as the proxy recorded them, stand in for upstream's build
# stamps (`kubectl version` shows them); same inputs, same binary.
(cd "$here/kube-apiserver" && go mod download "k8s.io/kubernetes@v$k8s_version")
info=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/v$k8s_version.info
commit=$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info")
built=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=v$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.gitCommit=${commit:-unknown}"
ldflags="$ldflags -X $pkg.buildDate=${built:-1970-01-01T00:00:00Z}"
# Build to a temporary name and rename, so an interrupted build never leaves a half binary behind.
(cd "$here/etcd" && go build -p 2 -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" . && mv "$out/etcd.tmp" "$out/etcd")
(cd "$here/kube-apiserver" && go build -p 2 -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver.tmp" . \
  && mv "$out/kube-apiserver.tmp" "$out/kube-apiserver")
