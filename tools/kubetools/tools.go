//go:build tools

// Package tools pins the Helm command in this module's go.mod, so `go build helm.sh/helm/v3/cmd/helm`
// from here resolves the same Kubernetes client libraries as kubectl (one build cache for both).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
