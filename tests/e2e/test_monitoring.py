"""Monitoring on a real Prometheus (Debian's 2.42, `groupops.devstack.prometheus`) scraping the
real operator and the consumer replicas of a running policy, with the chart's alert rules loaded:

- every alert rule is evaluated by Prometheus without error (rule health `ok`), and its
  expression answers an instant query;
- every dashboard panel's query answers, and the panels a running policy feeds return series;
- `promtool check metrics` finds nothing to say about the operator's or a replica's /metrics.

Prometheus labels the consumer targets with `namespace` and `pod` as the chart's PodMonitor does.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupops.devstack.paths import promtool_binary
from groupops.devstack.prometheus import PrometheusError, PrometheusServer, Target
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.waiting import wait_for
from tests.monitoring.dashboard import PANELS_WITH_DATA, panel_queries
from tests.monitoring.rules import RULES_FILE, alert_rules

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

PARTITIONS = 6
REPLICAS = 3


def scrape_targets(stack: PolicyStack) -> dict[str, list[Target]]:
    consumers: list[Target] = [
        (
            f"127.0.0.1:{run.process.env['GROUPOPS_METRICS_PORT']}",
            {"namespace": stack.namespace, "pod": run.name},
        )
        for run in stack.kubelet.history
        if run.process.alive()
    ]
    return {
        "groupops-operator": [f"127.0.0.1:{stack.operator.metrics_port}"],
        "groupops-consumers": consumers,
    }


def failing_queries(prometheus: PrometheusServer, named: list[tuple[str, str]]) -> dict[str, str]:
    """Each (name, expression) that Prometheus refuses, with its error."""
    failures: dict[str, str] = {}
    for name, expression in named:
        try:
            prometheus.query(expression)
        except PrometheusError as e:
            failures[name] = f"{e} in {expression}"
    return failures


@pytest.fixture
def running_policy(new_stack: StackFactory) -> Iterator[PolicyStack]:
    with new_stack(partitions=PARTITIONS) as s:
        s.apply(
            strategy={"type": "lag", "autoOffsetReset": "earliest"},
            consumers={"replicas": REPLICAS},
        )
        identities = [s.identity(i) for i in range(REPLICAS)]
        wait_for(
            "every replica acknowledging the plan", lambda: s.settled(identities), 240, explain=s.diagnostics
        )
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=1500, rate=300).start()
        yield s
        producer.wait()


def test_every_alert_and_panel_query_answers_on_prometheus_scraping_a_running_policy_and_promtool_agrees(
    running_policy: PolicyStack, tmp_path: Path
) -> None:
    s = running_policy
    with PrometheusServer(tmp_path / "prometheus", scrape_targets(s), rule_files=[RULES_FILE]) as prometheus:
        prometheus.wait_for_targets_up(60)

        def rules_evaluated() -> list[dict[str, object]] | None:
            rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
            evaluated = [r for r in rules if r.get("lastEvaluation", "").startswith("20")]
            return rules if rules and len(evaluated) == len(rules) else None

        rules = wait_for("every rule evaluated once", rules_evaluated, 30)
        unhealthy = {r["name"]: r.get("lastError") for r in rules if r.get("health") != "ok"}
        assert unhealthy == {}
        loaded = {r["name"] for r in rules if r.get("type") == "alerting"}
        assert loaded == {name for name, _ in alert_rules()}
        assert failing_queries(prometheus, alert_rules()) == {}

        queries = panel_queries(namespace=s.namespace, policy=s.name)
        assert queries
        assert failing_queries(prometheus, queries) == {}

        # Messages flow in this run, so the processing panels must show data too.
        expected = {*PANELS_WITH_DATA, "Processed/s per pod", "Consumer lag per pod"}

        def empty_panels() -> list[str]:
            """Expected panels none of whose queries returns series (a panel's second query
            may be legitimately empty, e.g. a handoff p95 when no handoff happened)."""
            with_data = {
                title for title, expression in queries if title in expected and prometheus.query(expression)
            }
            return sorted(expected - with_data)

        assert {title for title, _ in queries} >= expected
        # rate() needs two scrapes inside its window and the consumers process as they go.
        wait_for(
            "every panel that a running policy feeds showing data",
            lambda: not empty_panels(),
            60,
            interval=2,
            explain=lambda: f"empty: {empty_panels()}",
        )
    promtool_check_metrics(s)


def promtool_check_metrics(s: PolicyStack) -> None:
    """`promtool check metrics` on the operator's and one replica's /metrics: no lint finding."""
    ports = {"operator": s.operator.metrics_port}
    replica = next(run for run in s.kubelet.history if run.process.alive())
    ports[replica.name] = int(replica.process.env["GROUPOPS_METRICS_PORT"])
    for who, port in ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exposition = response.read()
        assert b"groupops_" in exposition
        checked = subprocess.run(
            [str(promtool_binary()), "check", "metrics"],
            input=exposition,
            capture_output=True,
            timeout=60,
            check=False,
        )
        problems = (checked.stdout + checked.stderr).decode().strip()
        assert checked.returncode == 0 and not problems, f"{who}: {problems}"
