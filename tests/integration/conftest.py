"""Fixtures the integration tests on the real API server share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from groupops.kubeapi import KubeClient
from tests.e2e.kube_api import KubeApi
from tests.e2e.runtime_support import create_namespace, create_topic
from tests.integration.test_consumer_runtime import Group


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


@pytest.fixture
def make_group(
    kafka_bootstrap: str, kube_config: str, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Callable[..., Group]]:
    """`make(n)`: a Group of its own (namespace, topic with n partitions, group id); every one
    made is closed (driver, consumers, proxies) at the end of the test. `bootstrap` and
    `new_topic(bootstrap, topic, partitions)`: another cluster, another way to create the topic."""
    api = KubeApi(kube_config)
    groups: list[Group] = []

    def make(
        partitions: int,
        *,
        bootstrap: str | None = None,
        new_topic: Callable[[str, str, int], None] = create_topic,
    ) -> Group:
        bootstrap = bootstrap or kafka_bootstrap
        namespace = unique_name("group")
        create_namespace(api, namespace)
        topic = unique_name("orders")
        new_topic(bootstrap, topic, partitions)
        g = Group(
            api=api,
            bootstrap=bootstrap,
            namespace=namespace,
            topic=topic,
            partitions=partitions,
            group_id=unique_name("processor"),
            workdir=tmp_path,
            kubeconfig=kube_config,
        )
        groups.append(g)
        return g

    try:
        yield make
    finally:
        for g in groups:
            g.close()
        api.close()
