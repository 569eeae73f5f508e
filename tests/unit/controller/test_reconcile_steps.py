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
    accounts = ["p-consumer-0", "p-consumer-1", "p-consumer-2"]
    assert kube.names("ServiceAccount") == kube.names("Role") == kube.names("RoleBinding") == accounts
    status = kube.policy("ns", "p")["status"]
    assert status["epoch"] == 1
    assert sum(len(m["partitions"]) for m in status["members"]) == 6
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {
        "Ready": ("True", "Reconciled"),
        "PlanApplied": ("True", "Published"),
        "Degraded": ("False", "AsExpected"),
        "Reconciling": ("True", "Progressing"),  # the in-memory API runs no pods: none is ready
        "Stalled": ("False", "AsExpected"),
    }
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


def approve(kube: FakeKube, spec: dict[str, Any], proposal_id: str) -> None:
    kube.put_policy("ns", "p", {**spec, "rebalance": {**spec["rebalance"], "approvedProposal": proposal_id}})


def test_manual_approval_publishes_the_proposal_its_id_names_once(kube: FakeKube, clock: Clock) -> None:
    manual = {**SPEC, "rebalance": {"approval": "manual"}, "consumers": {"replicas": 2}}
    kube.put_policy("ns", "p", manual)
    memory = PolicyMemory()
    assert run(kube, clock, memory).epoch == 1
    three = {**manual, "consumers": {"replicas": 3}}
    kube.put_policy("ns", "p", three)
    clock.advance(1)
    assert run(kube, clock, memory).epoch == 1
    status = kube.policy("ns", "p")["status"]
    proposal = status["proposal"]
    assert proposal["moves"] > 0 and "g-2" in proposal["assignment"]
    assert proposal["id"].startswith("p-")
    waiting = next(c for c in status["conditions"] if c["type"] == "PlanApplied")
    assert waiting["reason"] == "AwaitingApproval" and proposal["id"] in waiting["message"]

    approve(kube, three, "p-000000000000")  # names no proposal: nothing is published
    clock.advance(1)
    assert run(kube, clock, memory).epoch == 1
    status = kube.policy("ns", "p")["status"]
    assert status["proposal"]["id"] == proposal["id"], "the proposal stands under its id"
    waiting = next(c for c in status["conditions"] if c["type"] == "PlanApplied")
    assert "p-000000000000, which is not the standing proposal" in waiting["message"]

    approve(kube, three, proposal["id"])
    epochs = []
    for _ in range(3):
        clock.advance(1)
        epochs.append(run(kube, clock, memory).epoch)
    policy = kube.policy("ns", "p")
    assert policy["metadata"].get("annotations") in (None, {}), "the operator writes nothing into metadata"
    assert policy["spec"]["rebalance"]["approvedProposal"] == proposal["id"], "nor into spec"
    assert "proposal" not in policy["status"]
    assert policy["status"]["approvedProposal"] == proposal["id"]
    assert {m["instanceId"]: m["partitions"] for m in policy["status"]["members"]} == proposal["assignment"]
    applied = epochs[-1]
    assert applied > 1

    # The approval stays in the spec (as Git keeps it); the next proposal has another id and waits.
    kube.put_policy(
        "ns",
        "p",
        {
            **three,
            "rebalance": {"approval": "manual", "approvedProposal": proposal["id"]},
            "consumers": {"replicas": 2},
        },
    )
    clock.advance(1)
    assert run(kube, clock, memory).epoch == applied
    status = kube.policy("ns", "p")["status"]
    assert status["proposal"]["id"] != proposal["id"]
    waiting = next(c for c in status["conditions"] if c["type"] == "PlanApplied")
    assert f"{proposal['id']}, which was applied already" in waiting["message"]


def test_restart_continues_from_the_configmap_epoch(kube: FakeKube, clock: Clock) -> None:
    kube.put_policy("ns", "p", SPEC)
    run(kube, clock, PolicyMemory())
    kube.put_policy("ns", "p", spec_with(replicas=4))
    result = run(kube, clock, PolicyMemory())  # a fresh memory: the operator restarted
    assert result.epoch >= 2


def test_a_plan_that_would_not_fit_its_objects_is_refused_with_the_limit(
    kube: FakeKube, clock: Clock
) -> None:
    """100,000 partitions dealt round robin to 2 replicas: each replica's set (50,000 scattered
    partitions) is more than its Lease can report, so the plan is refused before any write."""
    huge = {
        **SPEC,
        "strategy": {"type": "roundrobin"},
        "lagSource": {"type": "static", "static": {"lags": {"t": [1] * 100_000}}},
        "consumers": {"replicas": 2},
    }
    kube.put_policy("ns", "p", huge)
    with pytest.raises(ReconcileFailure) as caught:
        run(kube, clock, PolicyMemory())
    assert caught.value.reason == "PlanTooLarge" and not caught.value.transient
    assert "262,144" in str(caught.value) and "more replicas" in str(caught.value)
    assert kube.names("ConfigMap") == [], "nothing written"
    stalled = next(c for c in kube.policy("ns", "p")["status"]["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "PlanTooLarge")
