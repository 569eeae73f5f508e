"""The chart's tests need only helm, built by `make kubetools` (which `make test` runs)."""

from __future__ import annotations

import pytest

from tests.chart.chart_support import Chart, helm_path


@pytest.fixture(scope="session")
def chart() -> Chart:
    helm = helm_path()
    if not helm.is_file():
        pytest.skip(f"{helm} is missing: build it with `make kubetools` (tools/kubetools/build.sh)")
    return Chart(helm)
