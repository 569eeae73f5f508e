"""The alerts are optional (they need the Prometheus Operator's CRDs); enabled, the chart renders
one PrometheusRule in the release namespace whose spec is the plain rules file exactly
(files/alerts/groupops-rules.yaml: one source, its `{{ $labels }}` templates left to Prometheus),
labelled like the chart's other objects plus the labels a Prometheus' ruleSelector needs."""

from __future__ import annotations

import yaml

from tests.chart.chart_support import NAMESPACE, Chart, find, named
from tests.monitoring.rules import RULES_FILE, alert_rules

ENABLED = {"metrics": {"prometheusRule": {"enabled": True}}}


def test_no_prometheus_rule_by_default(chart: Chart) -> None:
    assert not named(chart.render({}), "PrometheusRule")


def test_the_prometheus_rule_is_the_rules_file(chart: Chart) -> None:
    rule = find(chart.render(ENABLED), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "groupops"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())
    rendered = [(r["alert"], r["expr"]) for group in rule["spec"]["groups"] for r in group["rules"]]
    assert rendered == alert_rules()


def test_the_annotations_keep_their_prometheus_templates(chart: Chart) -> None:
    rule = find(chart.render(ENABLED), "PrometheusRule")
    summaries = [r["annotations"]["summary"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert any("{{ $labels.policy }}" in summary for summary in summaries)


def test_the_prometheus_rule_carries_the_chart_labels_and_yours(chart: Chart) -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "monitoring"}}}}
    labels = find(chart.render(values), "PrometheusRule")["metadata"]["labels"]
    assert labels["release"] == "monitoring"
    assert labels["app.kubernetes.io/instance"] == "groupops"
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["app.kubernetes.io/component"] == "alerts"


def test_a_misspelled_prometheus_rule_value_fails_naming_it(chart: Chart) -> None:
    error = chart.refusal({"metrics": {"prometheusRule": {"enable": True}}})
    assert "values don't meet the specifications of the schema" in error
    assert "enable" in error
