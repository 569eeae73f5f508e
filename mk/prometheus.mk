# Prometheus and promtool for the monitoring tests (a real Prometheus scraping the operator and
# consumer replicas, `promtool check/test rules`), from Debian's `prometheus` package: downloaded
# with apt (no root: `apt-get download`), unpacked with dpkg-deb, cached.
PROMETHEUS_VERSION := 2.42.0+ds-5+deb12u1
PROMETHEUS_DIR := $(CACHE)/prometheus-2.42.0
export GROUPOPS_PROMETHEUS := $(PROMETHEUS_DIR)

.PHONY: prometheus
prometheus: $(PROMETHEUS_DIR)/prometheus $(PROMETHEUS_DIR)/promtool

$(PROMETHEUS_DIR)/prometheus $(PROMETHEUS_DIR)/promtool &:
	tools/prometheus/fetch.sh '$(PROMETHEUS_VERSION)' $(PROMETHEUS_DIR)

TEST_DEPS += prometheus
