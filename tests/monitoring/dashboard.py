"""The chart's Grafana dashboard (charts/groupops/files/dashboards/groupops.json) as the tests see
it: its panels, and every panel's PromQL with Grafana's template variables filled in the way
Grafana fills them, so that a real Prometheus can run each one.

Who uses it: tests/unit/monitoring/test_dashboard.py (structure, metric names, filters) and the
monitoring e2e test, which sends every `panel_queries()` expression to a Prometheus scraping an
operator and its consumer replicas and expects series for the titles in `PANELS_WITH_DATA`.

How the dashboard selects series (the contract the tests check):

- operator series of a policy carry `namespace` and `policy` labels of their own; every query
  filters them with `OPERATOR_FILTERS`. The operator-wide ones (groupops_operator_*: leader,
  term, API requests, heartbeats) carry neither and are not filtered.
- consumer replicas label nothing themselves: their `namespace` and `pod` come from the scrape
  (the chart's PodMonitor). Pods are named `<policy>-<ordinal>` (controller/names.py `pod_name`),
  so `CONSUMER_FILTERS` matches `pod=~"$policy-[0-9]+"`: a policy `orders` then does not also
  select the pods of a policy `orders-eu`, as `$policy-.*` would. A Prometheus with static scrape
  configs (groupops.devstack.prometheus) must give each consumer target those two labels.

`$namespace` and `$policy` are multi-value variables with "All" = `.*`; Grafana substitutes them
as regular expressions (`(a|b)` for two values), so the values given to `panel_queries` are
regular expressions too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "CONSUMER_FILTERS",
    "DASHBOARD",
    "OPERATOR_FILTERS",
    "PANELS_WITH_DATA",
    "dashboard",
    "panel_queries",
    "panels",
    "substitute",
]

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/groupops/files/dashboards/groupops.json"

OPERATOR_FILTERS = ('namespace=~"$namespace"', 'policy=~"$policy"')
CONSUMER_FILTERS = ('namespace=~"$namespace"', 'pod=~"$policy-[0-9]+"')

# Grafana's built-in interval variables, as values Prometheus accepts. $__rate_interval is at
# least four scrape intervals in Grafana; one minute covers any scrape interval up to 15 s.
_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__interval_ms": "30000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}

# $name, ${name}, ${name:format} and the deprecated [[name]] / [[name:format]].
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")

PANELS_WITH_DATA: tuple[str, ...] = (
    # Fleet
    "Policies",
    "Lag sources failing",
    "Oldest lag in use",
    "Handoffs in flight",
    "Operator leader and term",
    "Total lag per policy",
    "Imbalance",
    "Reconcile duration p95",
    "API requests/s",
    "Heartbeats answered/s",
    "Operator waits p90",
    # Policy
    "Member lag",
    "Seconds since poll",
    "Time lag and goal",
    "Member time lag",
    "Plan epoch",
    "Members behind plan",
    "Handoff duration p95 and oldest handoff",
    "Rebalances by trigger",
    "Partition moves",
    # Consumers
    "Commits/s and failures",
    "Partitions owned per pod",
    "Lease valid",
    "Epoch applied per pod",
)
"""Panels of which at least one target returns series once an operator with one policy and its
running consumer replicas have been scraped for a while, with heartbeats on (the chart's and the
e2e operator's default; "Seconds since poll" and "Heartbeats answered/s" are empty without them).
The gauges of every policy are set at every reconcile; the policy's counters exist from its first
published plan; the consumers' unlabelled counters and gauges exist from the replica's start.

Left out, because a quiet run legitimately has none: fences, lag read failures, reconcile errors,
native assignment matches (delivery native only), processed/s and consumer lag (no series until
messages flow), revoke time p95 (NaN until a plan takes partitions away), self-fences and stuck,
stuck partitions by state (only STALL, STOP and REWIND are drawn). The time-lag panels need a
policy on `lagSource: kafka` (the one the e2e test runs)."""


@cache
def dashboard() -> Mapping[str, Any]:
    """The dashboard's JSON model, parsed once."""
    document: Mapping[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels(*, rows: bool = False) -> Iterator[Mapping[str, Any]]:
    """Every panel in dashboard order, including those of collapsed rows; rows themselves only
    with `rows=True`."""
    for panel in dashboard()["panels"]:
        if panel.get("type") == "row":
            if rows:
                yield panel
            yield from panel.get("panels") or []
        else:
            yield panel


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with every template variable replaced from `values`, then from Grafana's built-in
    intervals; a variable known to neither raises KeyError naming it."""

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group is not None)
        if name in values:
            return values[name]
        if name in _BUILTINS:
            return _BUILTINS[name]
        raise KeyError(f"the dashboard uses ${name}, which panel_queries does not fill in")

    return _VARIABLE.sub(value, expr)


def panel_queries(namespace: str = ".*", policy: str = ".*") -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, in dashboard order, with
    `$namespace` and `$policy` set to the given regular expressions (default: All)."""
    values = {"namespace": namespace, "policy": policy}
    return [
        (str(panel["title"]), substitute(str(target["expr"]), values))
        for panel in panels()
        for target in panel.get("targets") or []
        if target.get("expr")
    ]
