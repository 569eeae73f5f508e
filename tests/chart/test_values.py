"""The chart lints clean, and its values are a checked contract: values.schema.json types every
value (a misspelled or mistyped one fails with an error naming it) and README.md documents every
value with its default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.chart.chart_support import CHART, Chart

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
README = (CHART / "README.md").read_text()


def leaves(values: Any, schema: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, default, schema) of every value the chart defines: nested objects the chart itself
    defines are walked (those with `properties` in the schema); Kubernetes objects passed through
    (resources, securityContext, ...) are one value each."""
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        node = (schema.get("properties") or {}).get(key)
        if isinstance(value, dict) and node is not None and "properties" in node:
            yield from leaves(value, node, where)
        else:
            yield where, value, node


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_passes(chart: Chart, strict: bool) -> None:
    result = chart.run("lint", str(CHART), "--kube-version", "1.33.13", *(["--strict"] if strict else []))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_namespaced_values_lint_too(chart: Chart) -> None:
    result = chart.run(
        "lint",
        str(CHART),
        "--strict",
        "--set",
        "scope=namespaced",
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "kafkaAuthSecrets[0].namespace=team-a",
        "--set",
        "kafkaAuthSecrets[0].name=kafka-auth",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_value_is_in_the_schema_with_a_description() -> None:
    assert SCHEMA["additionalProperties"] is False
    for path, _default, node in leaves(VALUES, SCHEMA):
        assert node is not None, f"{path} is not in values.schema.json"
        assert node.get("description"), f"{path} has no description in values.schema.json"


def test_every_value_is_documented_in_the_readme_with_its_default() -> None:
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[2].strip()
        for line in README.splitlines()
        if line.startswith("| `")
    }
    for path, default, _node in leaves(VALUES, SCHEMA):
        assert path in rows, f"{path} is not in README.md's values table"
        if isinstance(default, dict | list) and default:
            continue  # a Kubernetes object (resources, securityContext): the README spells it out
        shown = default if isinstance(default, str) and default else json.dumps(default)
        assert f"`{shown}`" in rows[path], (
            f"README.md gives {path} a default other than {shown}: {rows[path]}"
        )


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param({"replica": 3}, "replica", id="top-level-typo"),
        pytest.param({"kafkaAuthSecret": []}, "kafkaAuthSecret", id="singular-plural"),
        pytest.param({"operator": {"tickSecond": 3}}, "tickSecond", id="nested-typo"),
        pytest.param({"crds": {"instal": False}}, "instal", id="crds-typo"),
        pytest.param(
            {"kafkaAuthSecrets": [{"namespace": "team-a", "secret": "kafka-auth"}]},
            "name",
            id="auth-secret-key",
        ),
    ],
)
def test_a_misspelled_value_fails_naming_it(chart: Chart, values: dict[str, Any], named: str) -> None:
    error = chart.refusal(values)
    assert "values don't meet the specifications of the schema" in error
    assert named in error


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param({"scope": "cluster-wide"}, "/scope", id="scope-enum"),
        pytest.param({"replicas": "two"}, "/replicas", id="replicas-type"),
        pytest.param({"replicas": -1}, "/replicas", id="replicas-minimum"),
        pytest.param({"operator": {"tickSeconds": 0.1}}, "/operator/tickSeconds", id="tick-minimum"),
        pytest.param(
            {"operator": {"statusFiguresSeconds": -1}}, "/operator/statusFiguresSeconds", id="figures-min"
        ),
        pytest.param(
            {"operator": {"leaseDurationSeconds": 0}}, "/operator/leaseDurationSeconds", id="lease-min"
        ),
        pytest.param(
            {"leaderElection": {"leaseSeconds": 1}}, "/leaderElection/leaseSeconds", id="election-min"
        ),
        pytest.param({"heartbeats": {"port": 70000}}, "/heartbeats/port", id="port-maximum"),
        pytest.param(
            {"heartbeats": {"intervalSeconds": 0}}, "/heartbeats/intervalSeconds", id="interval-minimum"
        ),
        pytest.param(
            {"heartbeats": {"fallbackWritesPerSecond": -5}},
            "/heartbeats/fallbackWritesPerSecond",
            id="fallback-budget-minimum",
        ),
        pytest.param({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", id="pull-policy-enum"),
        pytest.param({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0", id="namespace-pattern"),
        pytest.param(
            {"kafkaAuthSecrets": [{"name": "kafka-auth"}]}, "/kafkaAuthSecrets/0", id="namespace-missing"
        ),
        pytest.param({"podDisruptionBudget": {"minAvailable": "half"}}, "/podDisruptionBudget", id="pdb"),
        pytest.param({"extraEnv": [{"value": "x"}]}, "/extraEnv/0", id="env-without-name"),
        pytest.param({"crds": {"install": "yes"}}, "/crds/install", id="crds-install-type"),
    ],
)
def test_a_mistyped_value_fails_naming_it(chart: Chart, values: dict[str, Any], named: str) -> None:
    error = chart.refusal(values)
    assert "values don't meet the specifications of the schema" in error
    assert named in error


def test_a_parent_chart_may_pass_globals(chart: Chart) -> None:
    assert chart.render({"global": {"imageRegistry": "registry.example"}})
