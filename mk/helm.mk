# helm and kubectl for the operator's e2e tests (chart rendering, kubectl apply/get/describe and
# server-side dry run against the real API server), built from their Go modules and cached.
KUBETOOLS_DIR := $(CACHE)/kubetools-helm3.18.6-k8s1.33.13-r2
export GROUPOPS_KUBETOOLS := $(KUBETOOLS_DIR)

.PHONY: kubetools
kubetools: $(KUBETOOLS_DIR)/helm $(KUBETOOLS_DIR)/kubectl

# The directory name carries the pinned versions; a fresh clone's newer file times must not force a
# rebuild of cached binaries, so the sources are not prerequisites.
$(KUBETOOLS_DIR)/helm $(KUBETOOLS_DIR)/kubectl &:
	tools/kubetools/build.sh $(KUBETOOLS_DIR)

TEST_DEPS += kubetools
