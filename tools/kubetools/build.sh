#!/usr/bin/env bash
# Build helm and kubectl from their Go modules (pinned in this directory's go.mod/go.sum) into OUT_DIR.
# Usage: tools/kubetools/build.sh OUT_DIR
# Caches: GOMODCACHE and GOCACHE under $GROUPOPS_CACHE/go, shared with the kube-apiserver build, so the
# common Kubernetes client packages compile once. GO_BUILD_P (default 2) bounds parallel compiles.
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
cache=${GROUPOPS_CACHE:-$HOME/.cache/groupops}
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/cache GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
p=${GO_BUILD_P:-2}
mkdir -p "$out"
cd "$here"
# Temporary name then rename: an interrupted build never leaves a half binary behind.
go build -p "$p" -trimpath -ldflags "-s -w" -o "$out/kubectl.tmp" ./kubectl && mv "$out/kubectl.tmp" "$out/kubectl"
# The version stamps Helm's own Makefile sets: its version, and the Kubernetes minor that `helm
# template` assumes without --kube-version (otherwise 1.20).
hv=helm.sh/helm/v3
helm_ldflags="-s -w -X $hv/internal/version.version=v3.18.6"
for pkg in pkg/chartutil pkg/lint/rules; do
  helm_ldflags="$helm_ldflags -X $hv/$pkg.k8sVersionMajor=1 -X $hv/$pkg.k8sVersionMinor=33"
done
go build -p "$p" -trimpath -ldflags "$helm_ldflags" \
  -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm && mv "$out/helm.tmp" "$out/helm"
