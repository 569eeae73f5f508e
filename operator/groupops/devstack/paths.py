"""Where the local stack's pinned components live once `make stack` has fetched or built them.

The versions are pinned in the build files (tools/kafka-dist/pom.xml, tools/k8s/*/go.mod) and
repeated here; a unit test keeps the two in step. Everything sits under the project cache
(`$GROUPOPS_CACHE`, default ~/.cache/groupops), which the Makefile fills and CI may keep.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from groupops.devstack.errors import NotBuiltError

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "KAFKA_VERSION",
    "cache_dir",
    "etcd_binary",
    "java_binary",
    "kafka_libs",
    "kube_apiserver_binary",
    "prometheus_binary",
    "promtool_binary",
]

KAFKA_VERSION = "4.3.1"
K8S_VERSION = "1.33.13"
ETCD_VERSION = "3.5.21"
PROMETHEUS_VERSION = "2.42.0"
"""Debian bookworm's `prometheus` package (mk/prometheus.mk)."""

_BUILD_HINT = "run `make stack` in the repository (it fetches and builds the local stack)"


def cache_dir() -> Path:
    """The project cache: $GROUPOPS_CACHE, or ~/.cache/groupops."""
    configured = os.environ.get("GROUPOPS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "groupops"


def kafka_libs() -> Path:
    """The directory of the broker's jars (one flat classpath), or NotBuiltError."""
    libs = cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise NotBuiltError(f"Apache Kafka {KAFKA_VERSION} jars not found in {libs}: {_BUILD_HINT}")
    return libs


def _k8s_binary(name: str) -> Path:
    binary = cache_dir() / f"k8s-{K8S_VERSION}" / name
    if not os.access(binary, os.X_OK):
        raise NotBuiltError(f"{name} not found at {binary}: {_BUILD_HINT}")
    return binary


def kube_apiserver_binary() -> Path:
    return _k8s_binary("kube-apiserver")


def etcd_binary() -> Path:
    return _k8s_binary("etcd")


def java_binary() -> Path:
    """$JAVA_HOME/bin/java, else `java` on PATH (the broker needs Java 17 or newer)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    if found is None:
        raise NotBuiltError("no `java` on PATH and no JAVA_HOME: the Kafka broker needs Java 17+")
    return Path(found)


def _prometheus_tool(name: str) -> Path:
    configured = os.environ.get("GROUPOPS_PROMETHEUS")
    directory = Path(configured) if configured else cache_dir() / f"prometheus-{PROMETHEUS_VERSION}"
    binary = directory / name
    if not os.access(binary, os.X_OK):
        raise NotBuiltError(f"{name} not found at {binary}: run `make prometheus` in the repository")
    return binary


def prometheus_binary() -> Path:
    return _prometheus_tool("prometheus")


def promtool_binary() -> Path:
    return _prometheus_tool("promtool")
