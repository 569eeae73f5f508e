"""The Grafana dashboard is optional: with metrics.grafanaDashboard.enabled the chart renders
files/dashboards/groupops.json unchanged into a ConfigMap in the release namespace, labelled for
Grafana's dashboard sidecar (grafana_dashboard: "1", or the labels and annotations given)."""

from __future__ import annotations

import json

from tests.chart.chart_support import CHART, NAMESPACE, Chart, find, named

DASHBOARD = CHART / "files" / "dashboards" / "groupops.json"
NAME = "groupops-grafana-dashboard"


def enabled(**extra: object) -> dict[str, object]:
    return {"metrics": {"grafanaDashboard": {"enabled": True, **extra}}}


def test_no_dashboard_by_default(chart: Chart) -> None:
    assert not [doc for doc in named(chart.render({}), "ConfigMap") if doc["metadata"]["name"] == NAME]


def test_the_dashboard_configmap_carries_the_sidecar_label_and_the_json(chart: Chart) -> None:
    configmap = find(chart.render(enabled()), "ConfigMap", NAME)
    meta = configmap["metadata"]
    assert meta["namespace"] == NAMESPACE
    assert meta["labels"]["grafana_dashboard"] == "1"
    assert meta["labels"]["app.kubernetes.io/component"] == "grafana-dashboard"
    assert meta["labels"]["app.kubernetes.io/instance"] == "groupops"
    assert "annotations" not in meta
    assert list(configmap["data"]) == ["groupops.json"]
    assert json.loads(configmap["data"]["groupops.json"]) == json.loads(DASHBOARD.read_text())


def test_the_sidecar_label_and_folder_annotation_are_configurable(chart: Chart) -> None:
    values = enabled(
        labels={"grafana_dashboard": None, "dashboards": "groupops"},
        annotations={"grafana_folder": "Kafka"},
    )
    meta = find(chart.render(values), "ConfigMap", NAME)["metadata"]
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["labels"]["dashboards"] == "groupops"
    assert meta["annotations"] == {"grafana_folder": "Kafka"}


def test_a_label_value_that_is_not_a_string_is_refused(chart: Chart) -> None:
    error = chart.refusal(enabled(labels={"grafana_dashboard": 1}))
    assert "values don't meet the specifications of the schema" in error
    assert "grafanaDashboard" in error
