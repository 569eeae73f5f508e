"""Fixtures the integration tests on the real API server share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from groupops.kubeapi import KubeClient
from tests.e2e.kube_api import KubeApi


@pytest.fixture
def client(kube_config: str) -> KubeClient:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=kube_config, client_configuration=configuration)  # type: ignore[no-untyped-call]
    return KubeClient(k8s_client.ApiClient(configuration))


@pytest.fixture
def namespace(kube_config: str, unique_name: object) -> Iterator[str]:
    api = KubeApi(kube_config)
    name = unique_name("it")  # type: ignore[operator]
    api.create("Namespace", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    api.delete("Namespace", None, name)
    api.close()
