"""Fixtures shared by the operator's e2e tests: kubectl with the CRD installed, and the operator
running against the requesting module's `namespace` fixture (each module names its own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.operator_support import Kubectl, OperatorProcess, install_crd, kubetool, operator_fixture


@pytest.fixture
def kubectl(kube_config: str) -> Kubectl:
    kubetool("kubectl")
    client = Kubectl(kube_config)
    install_crd(client)
    return client


@pytest.fixture
def operator(kube_config: str, namespace: str, tmp_path: Any) -> Iterator[OperatorProcess]:
    yield from operator_fixture(kube_config, namespace, tmp_path)
