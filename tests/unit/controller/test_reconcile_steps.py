"""The reconcile's named steps against an in-memory API: what is created, published, reported,
and that a steady policy writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from groupops.controller.events import EventSink
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, ReconcileFailure, reconcile
from groupops.controller.settings import Settings
from tests.unit.controller.fake_kube import FakeKube

SPEC: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "g",
    "topics": ["t"],
    "strategy": {"type": "lag"},
    "lagSource": {"type": "static", "static": {"lags": {"t": [50, 40, 30, 20, 10, 10]}}},
    "consumers": {"replicas": 3},
}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def run(kube: FakeKube, clock: Clock, memory: PolicyMemory, name: str = "p") -> Any:
    deps = Deps(client=kube, settings=Settings(), metrics=Metrics(), events=EventSink(kube), wall_clock=clock)  # type: ignore[arg-type]
    return reconcile(kube.policy("ns", name), deps, memory)


def spec_with(**consumers: Any) -> dict[str, Any]:
    return {**SPEC, "consumers": {**SPEC["consumers"], **consumers}}


def test_first_reconcile_creates_everything_and_publishes_epoch_1(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", SPEC)
    result = run(kube, clock, PolicyMemory())
    assert result.published and result.epoch == 1
    assert kube.names("Pod") == ["p-0", "p-1", "p-2"]
    assert kube.names("Lease") == ["p-g-0", "p-g-1", "p-g-2"]
    assert kube.names("ConfigMap") == ["p-plan"]
    assert kube.names("ServiceAccount") == kube.names("Role") == kube.names("RoleBinding") == ["p-consumer"]
    status = kube.policy("ns", "p")["status"]
    assert status["epoch"] == 1
    assert sum(len(m["partitions"]) for m in status["members"]) == 6
    assert [c["status"] for c in status["conditions"]] == ["True", "True", "False"]
    assert "Rebalanced" in [e["reason"] for e in kube.list("v1", "Event", "ns")]


def test_a_steady_policy_writes_nothing(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", SPEC)
    memory = PolicyMemory()
    run(kube, clock, memory)
    run(kube, clock, memory)
    before = len(kube.writes)
    clock.advance(5)
    result = run(kube, clock, memory)
    assert not result.published and not result.status_written
    assert kube.writes[before:] == []


def test_scale_up_then_down_keeps_epochs_rising(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", SPEC)
    memory = PolicyMemory()
    epochs = [run(kube, clock, memory).epoch]
    kube.put_policy("ns", "p", spec_with(replicas=5))
    for _ in range(4):
        clock.advance(1)
        epochs.append(run(kube, clock, memory).epoch)
    assert kube.names("Pod") == [f"p-{i}" for i in range(5)]
    kube.put_policy("ns", "p", spec_with(replicas=2))
    for _ in range(4):
        clock.advance(1)
        epochs.append(run(kube, clock, memory).epoch)
    assert epochs == sorted(epochs)
    assert kube.names("Pod") == ["p-0", "p-1"]
    assert kube.names("Lease") == ["p-g-0", "p-g-1"]
    status = kube.policy("ns", "p")["status"]
    assert [m["instanceId"] for m in status["members"]] == ["g-0", "g-1"]
    assert sum(len(m["partitions"]) for m in status["members"]) == 6


def test_bad_spec_reports_and_touches_nothing(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", spec_with(priorities={"g-9": 1}))
    with pytest.raises(ReconcileFailure) as caught:
        run(kube, clock, PolicyMemory())
    assert caught.value.reason == "InvalidSpec" and not caught.value.transient
    ready = kube.policy("ns", "p")["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert kube.names("Pod") == []


def test_dry_run_applies_nothing(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", {**SPEC, "dryRun": True})
    run(kube, clock, PolicyMemory())
    assert kube.names("Pod") == kube.names("ConfigMap") == []
    status = kube.policy("ns", "p")["status"]
    assert status["conditions"][1]["reason"] == "DryRun"
    assert sum(len(m["partitions"]) for m in status["members"]) == 6


def test_manual_approval_waits_for_the_annotation(kube: FakeKube, clock: Clock) -> None:
    manual = {**SPEC, "rebalance": {"approval": "manual"}, "consumers": {"replicas": 2}}
    kube.put_policy("ns", "p", manual)
    memory = PolicyMemory()
    assert run(kube, clock, memory).epoch == 1
    kube.put_policy("ns", "p", {**manual, "consumers": {"replicas": 3}})
    clock.advance(1)
    assert run(kube, clock, memory).epoch == 1
    proposal = kube.policy("ns", "p")["status"]["proposal"]
    assert proposal["moves"] > 0 and "g-2" in proposal["assignment"]
    kube.patch(
        "groupops.dev/v1alpha1",
        "ConsumerGroupPolicy",
        "ns",
        "p",
        {"metadata": {"annotations": {"groupops.dev/approve": "true"}}},
    )
    epochs = []
    for _ in range(3):
        clock.advance(1)
        epochs.append(run(kube, clock, memory).epoch)
    policy = kube.policy("ns", "p")
    assert "groupops.dev/approve" not in (policy["metadata"].get("annotations") or {})
    assert "proposal" not in policy["status"]
    assert {m["instanceId"]: m["partitions"] for m in policy["status"]["members"]} == proposal["assignment"]
    assert epochs[-1] > 1


def test_restart_continues_from_the_configmap_epoch(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", SPEC)
    run(kube, clock, PolicyMemory())
    kube.put_policy("ns", "p", spec_with(replicas=4))
    result = run(kube, clock, PolicyMemory())  # a fresh memory: the operator restarted
    assert result.epoch >= 2
