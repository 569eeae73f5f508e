"""groupops' alert rules, read from the one rules file the chart ships
(charts/groupops/files/alerts/groupops-rules.yaml), for the tests that check or use them: the
promtool tests (tests/unit/monitoring), the chart's PrometheusRule test (tests/chart), and any test
that loads the rules into a real Prometheus (devstack.prometheus.PrometheusServer's `rule_files`).

`alert_rules()` gives (alert name, expression) in file order; `rule_groups()` the groups as
written, for tests that need `for`, labels or annotations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict, cast

import yaml

__all__ = ["ALERTS_TEST_FILE", "RULES_FILE", "AlertRule", "RuleGroup", "alert_rules", "rule_groups"]

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "charts" / "groupops" / "files" / "alerts" / "groupops-rules.yaml"
ALERTS_TEST_FILE = Path(__file__).with_name("alerts.test.yaml")
"""promtool's unit tests of RULES_FILE (`promtool test rules`)."""

# `for` is a Python keyword, hence the functional form.
AlertRule = TypedDict(
    "AlertRule",
    {"alert": str, "expr": str, "for": str, "labels": dict[str, str], "annotations": dict[str, str]},
    total=False,
)


class RuleGroup(TypedDict):
    name: str
    rules: list[AlertRule]


def rule_groups(path: Path = RULES_FILE) -> list[RuleGroup]:
    """The rule groups of the file at `path`, as written (YAML comments dropped)."""
    document: Any = yaml.safe_load(path.read_text())
    if not isinstance(document, dict) or not isinstance(document.get("groups"), list):
        raise ValueError(f"{path}: not a Prometheus rules file (no top-level `groups:` list)")
    return cast(list[RuleGroup], document["groups"])


def alert_rules(path: Path = RULES_FILE) -> list[tuple[str, str]]:
    """(alert name, expr) of every alerting rule in the file, in file order; recording rules are
    left out. A rule without a name or an expression is an error naming its group."""
    alerts: list[tuple[str, str]] = []
    for group in rule_groups(path):
        for index, rule in enumerate(group["rules"]):
            if "alert" not in rule:
                continue
            name, expr = rule.get("alert"), rule.get("expr")
            if not name or not expr:
                raise ValueError(f"{path}: group {group['name']!r}, rule {index}: no alert name or expr")
            alerts.append((name, expr))
    return alerts
