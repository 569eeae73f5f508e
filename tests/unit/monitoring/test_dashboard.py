"""The chart's Grafana dashboard is a well-formed Grafana model (uid, variables, a grid without
overlaps, a unit on every panel), reads only metrics the operator and the consumer replicas
export, and scopes every query to the chosen namespaces and policies: operator series by their
`namespace` and `policy` labels, consumer series by namespace and pod name `<policy>-<ordinal>`."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from groupops.consumer.metrics import ConsumerMetrics
from groupops.controller.metrics import Metrics
from groupops.controller.names import pod_name
from tests.monitoring.dashboard import (
    CONSUMER_FILTERS,
    OPERATOR_FILTERS,
    PANELS_WITH_DATA,
    dashboard,
    panel_queries,
    panels,
    substitute,
)

GRID_WIDTH = 24
# Grafana's unit ids (packages/grafana-data/src/valueFormats/categories.ts) this dashboard may use.
UNITS = {"none", "short", "s", "ms", "reqps", "ops", "mps", "opm", "cpm", "bool_yes_no", "percentunit"}
# The exposition names of each metric type (prometheus-client appends them to the family's name).
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
METRIC = re.compile(r"\bgroupops_\w+")


def exposed(registry: CollectorRegistry) -> set[str]:
    return {f"{family.name}{suffix}" for family in registry.collect() for suffix in SUFFIXES[family.type]}


OPERATOR_METRICS = exposed(Metrics().registry)
CONSUMER_METRICS = exposed(ConsumerMetrics().registry)
POLICY_METRICS = {
    f"{metric._name}{suffix}"
    for metric in vars(Metrics()).values()
    if isinstance(metric, MetricWrapperBase) and {"namespace", "policy"} <= set(metric._labelnames)
    for suffix in SUFFIXES[metric._type]
}
"""The operator's series that belong to a policy; the others (groupops_operator_*) are the
operator's own."""

PANELS = list(panels())
TEMPLATE_QUERIES = [var["definition"] for var in dashboard()["templating"]["list"] if var["type"] == "query"]
EXPRESSIONS = [
    pytest.param(str(target["expr"]), id=f"{panel['title']}/{target['refId']}")
    for panel in PANELS
    for target in panel["targets"]
] + [pytest.param(query, id=f"variable/{query}") for query in TEMPLATE_QUERIES]


def by_title(panel: Mapping[str, Any]) -> Any:
    return pytest.param(panel, id=str(panel["title"]))


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, its label matchers) of every metric the expression reads."""
    return [(match.group(), _matchers(expr, match.end())) for match in METRIC.finditer(expr)]


def _matchers(expr: str, end: int) -> str:
    if not expr.startswith("{", end):
        return ""
    return expr[end + 1 : expr.index("}", end)]


# -- the dashboard -------------------------------------------------------------------------------


def test_the_dashboard_is_grafana_39_with_a_fixed_uid_and_title() -> None:
    model = dashboard()
    assert (model["uid"], model["title"], model["schemaVersion"]) == ("groupops", "groupops", 39)
    assert model["id"] is None, "a provisioned dashboard carries no database id"


def test_the_variables_pick_a_prometheus_datasource_then_namespaces_then_policies() -> None:
    variables = {var["name"]: var for var in dashboard()["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "policy"]
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    for name in ("namespace", "policy"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"]["uid"] == "${datasource}"
        assert (var["multi"], var["includeAll"], var["allValue"]) == (True, True, ".*")
        assert var["query"]["query"] == var["definition"]
    assert variables["namespace"]["definition"] == "label_values(groupops_plan_epoch, namespace)"
    assert variables["policy"]["definition"] == (
        'label_values(groupops_plan_epoch{namespace=~"$namespace"}, policy)'
    )


def test_the_rows_are_fleet_policy_consumers() -> None:
    assert [row["title"] for row in panels(rows=True) if row["type"] == "row"] == [
        "Fleet",
        "Policy",
        "Consumers",
    ]


def test_panel_ids_and_titles_are_unique() -> None:
    everything = list(panels(rows=True))
    ids = [panel["id"] for panel in everything]
    assert len(ids) == len(set(ids)), f"repeated ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    titles = [panel["title"] for panel in PANELS]
    assert len(titles) == len(set(titles)), "the e2e test and panel_queries() name panels by title"


def test_panels_fit_the_grid_without_overlapping() -> None:
    placed = []
    for panel in panels(rows=True):
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0, panel["title"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= GRID_WIDTH, f"{panel['title']} is off the grid"
        placed.append((panel["title"], pos))
    for (a, pa), (b, pb) in itertools.combinations(placed, 2):
        apart = (
            pa["x"] + pa["w"] <= pb["x"]
            or pb["x"] + pb["w"] <= pa["x"]
            or pa["y"] + pa["h"] <= pb["y"]
            or pb["y"] + pb["h"] <= pa["y"]
        )
        assert apart, f"{a!r} {pa} overlaps {b!r} {pb}"


@pytest.mark.parametrize("panel", [by_title(panel) for panel in PANELS])
def test_every_panel_reads_the_chosen_datasource_in_a_unit(panel: Mapping[str, Any]) -> None:
    assert panel["type"] in ("timeseries", "stat")
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert panel["targets"], "no query"
    for target in panel["targets"]:
        assert target["datasource"] == panel["datasource"]
        assert target["expr"].strip()
    assert panel["fieldConfig"]["defaults"]["unit"] in UNITS


# -- the queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_metric_is_one_the_operator_or_a_consumer_exports(expr: str) -> None:
    names = [name for name, _ in selectors(expr)]
    assert names, "reads no groupops metric"
    unknown = [name for name in names if name not in OPERATOR_METRICS | CONSUMER_METRICS]
    assert not unknown, f"not exported by controller/metrics.py nor consumer/metrics.py: {unknown}"


@pytest.mark.parametrize("expr", EXPRESSIONS[: -len(TEMPLATE_QUERIES)])
def test_every_query_keeps_to_the_chosen_namespaces_and_policies(expr: str) -> None:
    for name, matchers in selectors(expr):
        if name in POLICY_METRICS:
            wanted = OPERATOR_FILTERS
        elif name in CONSUMER_METRICS:
            wanted = CONSUMER_FILTERS
        else:
            continue  # the operator's own series carry neither label
        missing = [matcher for matcher in wanted if matcher not in matchers]
        assert not missing, f"{name}{{{matchers}}} lacks {missing}"


def test_the_consumer_filter_selects_exactly_the_policys_pods() -> None:
    pod = next(m for m in CONSUMER_FILTERS if m.startswith("pod=~"))
    pattern = pod.removeprefix('pod=~"').removesuffix('"').replace("$policy", "orders")
    assert re.fullmatch(pattern, pod_name("orders", 0))
    assert re.fullmatch(pattern, pod_name("orders", 12))
    assert not re.fullmatch(pattern, pod_name("orders-eu", 0))


def test_panel_queries_fill_in_every_variable() -> None:
    targets = sum(len(panel["targets"]) for panel in PANELS)
    for queries in (panel_queries(), panel_queries("team-a", "orders"), panel_queries("(a|b)", "(p|q)")):
        assert len(queries) == targets
        left = [(title, expr) for title, expr in queries if "$" in expr or "[[" in expr]
        assert not left, left
    chosen = dict(panel_queries("team-a", "orders"))
    assert chosen["Total lag per policy"] == (
        'max by (namespace, policy) (groupops_total_lag{namespace=~"team-a", policy=~"orders"})'
    )
    assert 'pod=~"orders-[0-9]+"' in chosen["Lease valid"]
    assert "[1m]" in chosen["Reconcile duration p95"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param('x{a=~"$policy"}', 'x{a=~"p"}', id="dollar"),
        pytest.param('x{a=~"${policy}"}', 'x{a=~"p"}', id="braces"),
        pytest.param('x{a=~"${policy:regex}"}', 'x{a=~"p"}', id="format"),
        pytest.param('x{a=~"[[policy]]"}', 'x{a=~"p"}', id="deprecated"),
        pytest.param("rate(x[$__rate_interval])", "rate(x[1m])", id="rate-interval"),
        pytest.param("rate(x[${__interval}])", "rate(x[30s])", id="interval"),
        pytest.param("increase(x[$__range])", "increase(x[1h])", id="range"),
    ],
)
def test_substitute_fills_in_grafanas_variable_syntaxes(expr: str, expected: str) -> None:
    assert substitute(expr, {"policy": "p"}) == expected


def test_substitute_names_a_variable_it_cannot_fill_in() -> None:
    with pytest.raises(KeyError, match="topic"):
        substitute('x{topic=~"$topic"}', {})


def test_the_panels_that_must_have_data_are_panels_of_the_dashboard() -> None:
    titles = [panel["title"] for panel in PANELS]
    assert set(PANELS_WITH_DATA) <= set(titles), set(PANELS_WITH_DATA) - set(titles)
    quiet = {"Failovers (fences)", "Lag read failures", "Reconcile errors", "Self-fences and stuck"}
    assert not quiet & set(PANELS_WITH_DATA), "failures are legitimately absent in a quiet run"
