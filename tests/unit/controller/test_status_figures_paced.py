"""A run whose only status change is lag figures holds them back while status was written less than
`status_figures_seconds` ago (docs/design.md §8.3, "a figures-only status change waits"); the
metrics carry the new figures at once, anything else in status is written at once, and the held
figures go out with the first run after the interval."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import pytest

from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import PolicyMemory
from groupops.controller.settings import ReconcileSettings, Settings
from groupops.lag.kafka import KafkaLagSettings
from tests.fixtures.json_http import JsonHandler, serving
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.reconcile_support import reconcile_with_readers

EVERY_S = 3600.0


class Exporter(JsonHandler):
    """Prometheus answering the instant query with `lags` for partitions 0..5 of topic t."""

    lags: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        result = [
            {"metric": {"topic": "t", "partition": str(p)}, "value": [0, str(lag)]}
            for p, lag in enumerate(self.lags)
        ]
        self.send_json(200, {"status": "success", "data": {"resultType": "vector", "result": result}})


class Counts:
    """Stands in for `KafkaClusterReaders`: topic t has 6 partitions."""

    def partition_counts(self, settings: KafkaLagSettings, topics: Sequence[str]) -> dict[str, int]:
        return {topic: 6 for topic in topics if topic == "t"}


@pytest.fixture
def prometheus() -> Iterator[str]:
    Exporter.lags = [100, 200, 300, 400, 500, 600]
    with serving(Exporter) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def policy_spec(url: str, **rebalance: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kafka": {"bootstrapServers": "k1:9092"},
        "groupId": "g",
        "topics": ["t"],
        "strategy": {"type": "lag"},
        "lagSource": {"type": "prometheus", "prometheus": {"url": url}},
        "consumers": {"replicas": 3},
    }
    if rebalance:
        spec["rebalance"] = rebalance
    return spec


class Policy:
    def __init__(self, url: str, every_s: float = EVERY_S) -> None:
        self.kube, self.memory, self.metrics = FakeKube(), PolicyMemory(), Metrics()
        self.settings = replace(Settings(), reconcile=ReconcileSettings(status_figures_seconds=every_s))
        # a high threshold: moving lag never replans, so only the figures change
        self.kube.put_policy("ns", "p", policy_spec(url, imbalanceThreshold=100, interval="1h"))

    def run(self) -> Any:
        return reconcile_with_readers(
            self.kube, Counts(), self.memory, metrics=self.metrics, settings=self.settings
        )

    def status(self) -> Mapping[str, Any]:
        return self.kube.policy("ns", "p")["status"]

    def status_writes(self) -> int:
        return sum(1 for verb, kind, _ in self.kube.writes if verb == "patch/status")

    def held(self) -> float:
        return self.metrics.status_figures_held.labels("ns", "p")._value.get()

    def total_lag_metric(self) -> float:
        return self.metrics.total_lag.labels("ns", "p")._value.get()


def settle(policy: Policy) -> None:
    """Runs until a run writes nothing (the first ones publish and report)."""
    for _ in range(5):
        before = policy.status_writes()
        policy.run()
        if policy.status_writes() == before:
            return
    raise AssertionError("the policy's status never settled")


def test_moving_lag_is_held_back_then_written_after_the_interval(prometheus: str) -> None:
    policy = Policy(prometheus)
    settle(policy)
    epoch, written = policy.status()["epoch"], policy.status_writes()
    assert policy.status()["totalLag"] == 2100

    Exporter.lags = [110, 210, 310, 410, 510, 610]
    result = policy.run()
    assert not result.published and result.epoch == epoch
    assert policy.status_writes() == written, "figures alone, written less than the interval ago: held"
    assert policy.status()["totalLag"] == 2100
    assert policy.total_lag_metric() == 2160, "the metric is current"
    assert policy.held() == 1
    last = policy.memory.status_written_at
    assert last is not None and policy.memory.figures_due == last + EVERY_S

    policy.memory.status_written_at = last - EVERY_S  # the interval has passed
    policy.run()
    assert policy.status_writes() == written + 1
    assert policy.status()["totalLag"] == 2160
    assert sum(m["lag"] for m in policy.status()["members"]) == 2160
    assert policy.memory.figures_due is None


def test_a_lag_reaching_zero_is_written_at_once(prometheus: str) -> None:
    policy = Policy(prometheus)
    settle(policy)
    written = policy.status_writes()
    Exporter.lags = [0] * 6
    policy.run()
    assert policy.status_writes() == written + 1, "caught up is news, not a figure"
    assert policy.status()["totalLag"] == 0
    assert policy.held() == 0


def test_with_the_interval_at_zero_every_change_is_written(prometheus: str) -> None:
    policy = Policy(prometheus, every_s=0.0)
    settle(policy)
    written = policy.status_writes()
    Exporter.lags = [110, 210, 310, 410, 510, 610]
    policy.run()
    assert policy.status_writes() == written + 1
    assert policy.status()["totalLag"] == 2160


def test_a_condition_change_goes_out_at_once_with_the_newest_figures(prometheus: str) -> None:
    policy = Policy(prometheus)
    settle(policy)
    written = policy.status_writes()
    Exporter.lags = [110, 210, 310, 410, 510, 610]
    policy.run()
    assert policy.status_writes() == written

    scaled = policy_spec(prometheus, imbalanceThreshold=100, interval="1h")
    policy.kube.put_policy("ns", "p", {**scaled, "consumers": {"replicas": 2}})
    policy.run()
    assert policy.status_writes() > written
    status = policy.status()
    assert status["replicas"] == 2 and status["totalLag"] == 2160
    assert policy.memory.figures_due is None
