"""The alert rules (charts/groupops/files/alerts/groupops-rules.yaml) are valid Prometheus rules,
pass their promtool unit tests (tests/monitoring/alerts.test.yaml), and every alert has a case
there where it fires and one where it stays silent. Every alert reads only metrics groupops
exports, says how long and how bad (`for`, severity), names the policy it is about, points at
the runbook, and is in the operations guide's table.

promtool comes from `make test` (mk/prometheus.mk), so a missing promtool fails these tests
instead of skipping them.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from groupops.consumer.metrics import ConsumerMetrics
from groupops.controller.metrics import Metrics
from groupops.devstack import NotBuiltError, paths
from tests.monitoring.rules import ALERTS_TEST_FILE, RULES_FILE, AlertRule, alert_rules, rule_groups

OPERATIONS_GUIDE = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
RUNBOOK = "docs/operations.md#alerts"
SEVERITIES = {"critical", "warning"}
OPERATOR_WIDE_GROUP = "groupops-operator"
"""The group of the alerts about the operator itself; every other alert is about one policy."""
# The exposition names of each metric type (prometheus-client appends them to the family's name).
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
METRIC = re.compile(r"\bgroupops_\w+")

ALERTS = [pytest.param(rule, id=rule["alert"]) for group in rule_groups() for rule in group["rules"]]
POLICY_ALERTS = [
    pytest.param(rule, id=rule["alert"])
    for group in rule_groups()
    if group["name"] != OPERATOR_WIDE_GROUP
    for rule in group["rules"]
]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    try:
        binary = paths.promtool_binary()
    except NotBuiltError as e:
        pytest.fail(str(e), pytrace=False)  # make test builds it (mk/prometheus.mk): never skip
    return subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def exposed(registry: CollectorRegistry) -> set[str]:
    return {f"{family.name}{suffix}" for family in registry.collect() for suffix in SUFFIXES[family.type]}


def alert_cases(path: Path = ALERTS_TEST_FILE) -> list[Mapping[str, Any]]:
    """Every `alert_rule_test` entry of the promtool test file: (eval_time, alertname, exp_alerts)."""
    document = yaml.safe_load(path.read_text())
    return [case for group in document["tests"] for case in group.get("alert_rule_test") or []]


# -- promtool ------------------------------------------------------------------------------------


def test_promtool_accepts_the_rules_file() -> None:
    result = promtool("check", "rules", RULES_FILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_the_alerts_pass_their_promtool_unit_tests() -> None:
    result = promtool("test", "rules", ALERTS_TEST_FILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_load_the_rules_file_the_chart_ships() -> None:
    document = yaml.safe_load(ALERTS_TEST_FILE.read_text())
    loaded = [(ALERTS_TEST_FILE.parent / name).resolve() for name in document["rule_files"]]
    assert loaded == [RULES_FILE]


def test_every_alert_fires_in_one_case_and_stays_silent_in_another() -> None:
    names = [name for name, _expr in alert_rules()]
    cases = alert_cases()
    firing = {case["alertname"] for case in cases if case.get("exp_alerts")}
    silent = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    assert [name for name in names if name not in firing] == [], "alerts never seen firing"
    assert [name for name in names if name not in silent] == [], "alerts never seen silent"
    # promtool passes a silent case of an alert that does not exist: a misspelt name tests nothing.
    assert sorted({case["alertname"] for case in cases} - set(names)) == [], "cases of unknown alerts"


# -- what every alert carries --------------------------------------------------------------------


def test_alert_names_are_unique() -> None:
    names = [name for name, _expr in alert_rules()]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []


def test_alerts_read_only_metrics_groupops_exports() -> None:
    exported = exposed(Metrics().registry) | exposed(ConsumerMetrics().registry)
    unknown = {
        name: sorted(set(METRIC.findall(expr)) - exported)
        for name, expr in alert_rules()
        if set(METRIC.findall(expr)) - exported
    }
    assert unknown == {}, "metrics that neither controller/metrics.py nor consumer/metrics.py exports"


@pytest.mark.parametrize("rule", ALERTS)
def test_every_alert_says_how_long_how_bad_and_what_to_do(rule: AlertRule) -> None:
    assert re.fullmatch(r"[0-9]+[smh]", rule.get("for", "")), "`for` missing or not a duration"
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    annotations = rule.get("annotations", {})
    assert annotations.get("summary"), "no summary"
    assert annotations.get("description"), "no description"
    assert annotations.get("runbook") == RUNBOOK


@pytest.mark.parametrize("rule", POLICY_ALERTS)
def test_every_alert_about_a_policy_names_it(rule: AlertRule) -> None:
    named = "{{ $labels.namespace }}/{{ $labels.policy }}"
    annotations = rule.get("annotations", {})
    assert named in annotations.get("summary", ""), "the summary does not name the policy"
    assert named in annotations.get("description", ""), "the description does not name the policy"


def test_the_operations_guide_explains_every_alert() -> None:
    guide = OPERATIONS_GUIDE.read_text()
    section = guide.partition("\n## Alerts\n")[2].partition("\n## ")[0]
    assert section, "docs/operations.md has no `## Alerts` section (the runbook anchor #alerts)"
    rows = {line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")}
    assert [name for name, _expr in alert_rules() if name not in rows] == []
    assert sorted(rows - {name for name, _expr in alert_rules()}) == [], "rows for alerts that do not exist"
