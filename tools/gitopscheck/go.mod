// gitopscheck: how Argo CD and Flux judge a ConsumerGroupPolicy's status, for the tests
// (tests/unit/gitops, tests/fixtures/gitops.py). See mk/gitopscheck.mk and docs/gitops.md.
//
// Pinned: cli-utils v0.37.2 is the kstatus that Flux's and kpt's health checks are built on (the
// newest release the module proxy serves; it asks for the 1.30 libraries, raised here to the 1.33
// ones kubetools and the local API server use, so the build shares their compiled packages);
// gopher-lua v1.1.2 is the Lua 5.1 VM Argo CD embeds for resource health checks.
module groupops.dev/tools/gitopscheck

go 1.24.0

require (
	github.com/yuin/gopher-lua v1.1.2
	k8s.io/apimachinery v0.33.13
	sigs.k8s.io/cli-utils v0.37.2
	sigs.k8s.io/yaml v1.4.0
)

require (
	github.com/fxamacker/cbor/v2 v2.7.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/api v0.33.13 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/utils v0.0.0-20241104100929-3ea5e8cea738 // indirect
	sigs.k8s.io/json v0.0.0-20241010143419-9aa6b5e7a4b3 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.6.0 // indirect
)
