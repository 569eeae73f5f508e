"""The local stack's versions live in the build files (what `make stack` fetches and builds) and
in groupops.devstack.paths (where the servers are looked up); they must agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from groupops.devstack import NotBuiltError, paths

ROOT = Path(__file__).resolve().parents[3]


def test_kafka_version_matches_the_maven_project() -> None:
    pom = (ROOT / "tools" / "kafka-dist" / "pom.xml").read_text()
    pinned = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert pinned is not None and pinned.group(1) == paths.KAFKA_VERSION


def test_kubernetes_and_etcd_versions_match_the_go_modules() -> None:
    apiserver = (ROOT / "tools" / "k8s" / "kube-apiserver" / "go.mod").read_text()
    etcd = (ROOT / "tools" / "k8s" / "etcd" / "go.mod").read_text()
    assert f"k8s.io/kubernetes v{paths.K8S_VERSION}" in apiserver
    assert f"go.etcd.io/etcd/server/v3 v{paths.ETCD_VERSION}" in etcd


def test_prometheus_version_matches_the_debian_package_the_makefile_fetches() -> None:
    makefile = (ROOT / "mk" / "prometheus.mk").read_text()
    assert f"PROMETHEUS_VERSION := {paths.PROMETHEUS_VERSION}+ds" in makefile
    assert f"PROMETHEUS_DIR := $(CACHE)/prometheus-{paths.PROMETHEUS_VERSION}" in makefile


def test_every_staging_module_is_replaced_by_its_published_tag() -> None:
    go_mod = (ROOT / "tools" / "k8s" / "kube-apiserver" / "go.mod").read_text()
    staging_tag = "v0." + paths.K8S_VERSION.split(".", 1)[1]
    replaced = re.findall(r"^\s*(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (v\S+)$", go_mod, flags=re.MULTILINE)
    assert len(replaced) >= 30
    assert all(source == target and tag == staging_tag for source, target, tag in replaced)


def test_an_empty_cache_names_the_make_target_that_fills_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUPOPS_CACHE", str(tmp_path))
    assert paths.cache_dir() == tmp_path
    for lookup in (paths.kafka_libs, paths.kube_apiserver_binary, paths.etcd_binary):
        with pytest.raises(NotBuiltError, match="make stack"):
            lookup()
