# The local stack (issue 3): Apache Kafka's broker from Maven Central, kube-apiserver and etcd built
# from their Go modules, all cached under $(CACHE). `make stack` fetches or builds what is missing;
# `make dev-up` / `make dev-down` run one broker and the API server for a developer (.dev/env).
#
# Versions are read from the build files, which are their one source (groupops.devstack.paths
# repeats them; tests/unit/devstack/test_devstack_versions.py keeps the two in step). The cache directories
# carry the version in their name, and the sources are not prerequisites: a fresh clone's newer
# file times must not rebuild cached binaries. Bump the version (or delete the directory) to rebuild.

KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' tools/kafka-dist/pom.xml)
K8S_VERSION := $(shell sed -n 's:^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s.io/kubernetes v\([0-9.]*\).*:\2:p' tools/k8s/kube-apiserver/go.mod)
KAFKA_LIBS := $(CACHE)/kafka-$(KAFKA_VERSION)/libs
KAFKA_CDS := $(CACHE)/kafka-$(KAFKA_VERSION)/cds/broker.jsa
K8S_BIN := $(CACHE)/k8s-$(K8S_VERSION)
DEV_DIR := .dev

.PHONY: stack kafka-dist kafka-cds k8s-bin dev-up dev-down dev-status

stack: kafka-dist kafka-cds k8s-bin

kafka-dist: $(KAFKA_LIBS)/.complete
k8s-bin: $(K8S_BIN)/kube-apiserver $(K8S_BIN)/etcd

# The local Maven repository is the project's own (-Dmaven.repo.local), not ~/.m2.
$(KAFKA_LIBS)/.complete:
	mvn -B -q -f tools/kafka-dist/pom.xml -Dmaven.repo.local=$(CACHE)/m2 \
	  -Dkafka.libs=$(KAFKA_LIBS) dependency:copy-dependencies
	touch $@

# One broker run that records the JVM's class-data-sharing archives: later brokers start in about
# half the time. Needs the venv (the broker is started by groupops.devstack).
kafka-cds: $(KAFKA_CDS)
$(KAFKA_CDS): | $(KAFKA_LIBS)/.complete $(INSTALLED)
	$(PY) -m groupops.devstack warm

# Slow the first time (about 15-25 min on 2 cores): the whole kube-apiserver dependency tree.
$(K8S_BIN)/kube-apiserver $(K8S_BIN)/etcd &:
	tools/k8s/build.sh $(K8S_BIN) $(K8S_VERSION)

dev-up: $(INSTALLED) stack
	$(PY) -m groupops.devstack up --state-dir $(DEV_DIR)

dev-down: $(INSTALLED)
	$(PY) -m groupops.devstack down --state-dir $(DEV_DIR)

dev-status: $(INSTALLED)
	$(PY) -m groupops.devstack status --state-dir $(DEV_DIR)

TEST_DEPS += stack
