// Builds the real kube-apiserver of a pinned Kubernetes release from its Go modules, for the
// local test stack (see mk/stack.mk). k8s.io/kubernetes requires its staging modules at v0.0.0
// and maps them to ./staging in its own go.mod; those replaces do not apply to a dependent module,
// so this module maps each one to its published v0.X.Y tag instead.
module groupops.dev/tools/kube-apiserver

go 1.24.0

require k8s.io/kubernetes v1.33.13

replace (
	k8s.io/api => k8s.io/api v0.33.13
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.33.13
	k8s.io/apimachinery => k8s.io/apimachinery v0.33.13
	k8s.io/apiserver => k8s.io/apiserver v0.33.13
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.33.13
	k8s.io/client-go => k8s.io/client-go v0.33.13
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.33.13
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.33.13
	k8s.io/code-generator => k8s.io/code-generator v0.33.13
	k8s.io/component-base => k8s.io/component-base v0.33.13
	k8s.io/component-helpers => k8s.io/component-helpers v0.33.13
	k8s.io/controller-manager => k8s.io/controller-manager v0.33.13
	k8s.io/cri-api => k8s.io/cri-api v0.33.13
	k8s.io/cri-client => k8s.io/cri-client v0.33.13
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.33.13
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.33.13
	k8s.io/endpointslice => k8s.io/endpointslice v0.33.13
	k8s.io/externaljwt => k8s.io/externaljwt v0.33.13
	k8s.io/kms => k8s.io/kms v0.33.13
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.33.13
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.33.13
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.33.13
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.33.13
	k8s.io/kubectl => k8s.io/kubectl v0.33.13
	k8s.io/kubelet => k8s.io/kubelet v0.33.13
	k8s.io/metrics => k8s.io/metrics v0.33.13
	k8s.io/mount-utils => k8s.io/mount-utils v0.33.13
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.33.13
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.33.13
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.33.13
	k8s.io/sample-controller => k8s.io/sample-controller v0.33.13
)
