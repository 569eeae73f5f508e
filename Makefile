# groupops: `make demo` runs the main job, `make test` runs every test. Both set up what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GROUPOPS_CACHE ?= $(HOME)/.cache/groupops
CACHE := $(GROUPOPS_CACHE)
export PIP_CACHE_DIR := $(CACHE)/pip
export GROUPOPS_CACHE
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1
INSTALLED := $(VENV)/.installed

# Each area (Kafka harness, local stack, ...) adds its build steps to TEST_DEPS in its own mk/*.mk.
TEST_DEPS :=
include $(wildcard mk/*.mk)

.PHONY: install test test-serial lint unit demo demo-assign clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3
	$(PY) -m pip install --quiet -e '.[dev,pipeline,connect]'
	touch $@

lint: $(INSTALLED)
	$(VENV)/bin/ruff check operator tests benchmarks
	$(VENV)/bin/ruff format --check operator tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Every test in three lanes at once (tests/lanes.py, docs/design.md §11): about 28 minutes in a
# fresh clone with warm caches, where Spark alone after the others made it 45.
test: lint $(TEST_DEPS)
	$(PY) -m tests.lanes

# The same tests in one pytest process, one at a time.
test-serial: lint $(TEST_DEPS)
	$(PY) -m pytest

unit: $(INSTALLED)
	$(PY) -m pytest tests/unit

# The main job end to end (groupops.devstack.demo): the local stack, the operator, a runner playing
# the kubelet, two example policies on skewed data, a rebalance on lag and a measured failover.
# First it builds what `make test` builds (mk/stack.mk, mk/helm.mk), saying what and for how long.
demo: $(INSTALLED)
	@$(PY) -m groupops.devstack build -- $(MAKE) --no-print-directory stack kubetools
	$(PY) -m groupops.devstack demo

# The engine alone: `groupops assign` on every group document of examples/groups/.
demo-assign: $(INSTALLED)
	@for f in examples/groups/*.json; do \
	  echo "== groupops assign --input $$f --format table"; \
	  $(VENV)/bin/groupops assign --input $$f --format table || exit 1; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
