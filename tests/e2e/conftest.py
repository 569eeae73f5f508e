"""Fixtures shared by the operator's e2e tests: kubectl with the CRD installed, a namespace per
module (a module that wants one per test overrides `namespace`), and the operator running
against it, per test (`operator`) or once for the module (`module_operator`); and `new_stack`,
the whole stack of the consumer tests (operator, kubelet harness, topic) for one test."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.consumer_e2e import StackFactory, policy_stack
from tests.e2e.operator_support import (
    Kubectl,
    OperatorProcess,
    create_namespace,
    install_crd,
    kubetool,
    operator_fixture,
)
from tests.fixtures.stack import make_unique_name


@pytest.fixture(scope="module")
def kubectl(kube_config: str) -> Kubectl:
    kubetool("kubectl")
    client = Kubectl(kube_config)
    install_crd(client)
    return client


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """`<what the module tests>-<8 hex>`, from the module's name (test_operator_examples -> examples)."""
    name = make_unique_name(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_operator_"))
    create_namespace(kubectl, name)
    return name


@pytest.fixture
def operator(kube_config: str, namespace: str, tmp_path: Any) -> Iterator[OperatorProcess]:
    yield from operator_fixture(kube_config, namespace, tmp_path)


@pytest.fixture(scope="module")
def module_operator(
    kube_config: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_fixture(kube_config, namespace, tmp_path_factory.mktemp("operator"))


@pytest.fixture
def new_stack(
    kube_config: str, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> StackFactory:
    """`with new_stack(partitions=4, ...) as s:` (the other arguments of `policy_stack`)."""
    return functools.partial(
        policy_stack,
        kube_config=kube_config,
        kafka_bootstrap=kafka_bootstrap,
        unique_name=unique_name,
        tmp_path=tmp_path,
    )
