"""Which full runs leave a policy settled (controller/settled.py): every rule that still waits on
time keeps the tick running in full, one case each, against a run that is settled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from groupops.controller.identities import IdentityView, LeaseClock, identity_view
from groupops.controller.settled import comparable, plans_on_counts, shape_of, unsettled_reason
from groupops.controller.spec import PolicySpec, parse_policy
from groupops.lag import LagSnapshot
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.handoff import Release
from groupops.planner.plan_format import PublishedPlan
from groupops.planner.stuck import PartitionState

T = TopicPartition
GRACE_S = 30.0


def spec(*, merge: bool = True, **changes: Any) -> PolicySpec:
    """The test's policy, each field in `changes` merged into the field's mapping (or replacing
    it with `merge=False`)."""
    document: dict[str, Any] = {
        "kafka": {"bootstrapServers": "k:9092"},
        "groupId": "g",
        "topics": ["t"],
        "strategy": {"type": "range"},
        "lagSource": {"type": "static", "static": {"lags": {"t": [1, 2]}}},
        "consumers": {"replicas": 2},
    }
    for key, value in changes.items():
        merged = merge and isinstance(value, Mapping)
        document[key] = {**document.get(key, {}), **value} if merged else value
    return parse_policy(document)


def lease(holder: str | None, renew: str = "t1") -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": 10, "renewTime": renew}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": f"lease-{holder}", "annotations": {}}, "spec": spec}


def view(leases: Mapping[str, Any], *, now: float = 100.0, clock: LeaseClock | None = None) -> IdentityView:
    pods = [
        {
            "metadata": {
                "name": f"p-{i}",
                "labels": {"groupops.dev/ordinal": str(i), "groupops.dev/template-hash": "h"},
            }
        }
        for i in range(2)
    ]
    return identity_view(
        group_id="g",
        replicas=2,
        zones=(),
        priorities={},
        template_hash="h",
        pods=pods,
        leases=dict(leases),
        published={"g-0": [T("t", 0)], "g-1": [T("t", 1)]},
        clock=clock or LeaseClock(),
        now=now,
        lease_duration=10,
        startup_grace=GRACE_S,
    )


PLAN = PublishedPlan(
    plan=Plan(
        epoch=3, strategy="range", assignment={MemberId("g-0"): (T("t", 0),), MemberId("g-1"): (T("t", 1),)}
    )
)
LIVE = {"g-0": lease("g-0"), "g-1": lease("g-1")}


def reason(**changes: Any) -> str | None:
    arguments: dict[str, Any] = {
        "spec": spec(),
        "plan": PLAN,
        "published": False,
        "trigger": None,
        "waiting": None,
        "view": view(LIVE),
        "startup_grace": GRACE_S,
        "degraded": False,
        "time_lag_known": False,
        "total_lag": 3,
        "stall_handoffs": False,
        "offset_reset": False,
    }
    return unsettled_reason(**{**arguments, **changes})


def test_a_quiet_run_with_every_replica_live_and_acknowledged_is_settled() -> None:
    assert reason() is None


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        pytest.param({"spec": spec(dryRun=True)}, "dry run", id="dry-run"),
        pytest.param({"spec": spec(consumers={"delivery": "native"})}, "native", id="native"),
        pytest.param(
            {
                "spec": spec(
                    merge=False, consumers={"autoscale": {"min": 1, "max": 3, "targetLagPerReplica": 10}}
                )
            },
            "autoscale",
            id="autoscale",
        ),
        pytest.param({"published": True}, "decided a change", id="published"),
        pytest.param({"trigger": "MembershipChanged"}, "decided a change", id="trigger"),
        pytest.param({"waiting": "AwaitingApproval"}, "one waits", id="proposal"),
        pytest.param(
            {
                "plan": replace(
                    PLAN, releasing={T("t", 1): Release(identity=MemberId("g-1"), epoch=3, since=0.0)}
                )
            },
            "handoff",
            id="releasing",
        ),
        pytest.param({"plan": replace(PLAN, barrier=3)}, "handoff", id="resync-barrier"),
        pytest.param({"degraded": True}, "degraded", id="degraded"),
        pytest.param(
            {"time_lag_known": True, "spec": spec(strategy={"type": "lag"})}, "time lag", id="time-lag-grows"
        ),
        pytest.param({"stall_handoffs": True}, "stalled", id="stall-kept-away"),
        pytest.param({"offset_reset": True}, "offset reset", id="offset-reset"),
    ],
)
def test_a_rule_that_waits_on_time_keeps_the_ticks_running(changes: dict[str, Any], why: str) -> None:
    found = reason(**changes)
    assert found is not None and why in found


def test_time_lag_with_nothing_behind_stays_zero_and_settles() -> None:
    assert reason(time_lag_known=True, total_lag=0) is None


def test_a_replica_in_its_startup_grace_is_not_settled_and_after_it_is() -> None:
    clock = LeaseClock()
    untaken = {"g-0": lease("g-0"), "g-1": lease(None, renew="")}
    starting = view(untaken, now=100.0, clock=clock)
    found = reason(view=starting)
    assert found is not None and "startup grace" in found
    renewed = {**untaken, "g-0": lease("g-0", renew="t2")}
    after = view(renewed, now=100.0 + GRACE_S + 1, clock=clock)
    assert reason(view=after) is None, "past the grace the missing replica is simply not a member"


def test_an_expired_lease_is_not_settled_until_it_is_fenced() -> None:
    clock = LeaseClock()
    view(LIVE, now=100.0, clock=clock)  # first seen at 100
    expired = view(LIVE, now=100.0 + 11, clock=clock)  # unchanged for longer than its 10 s
    found = reason(view=expired)
    assert found is not None and "ran out" in found


def test_two_reads_of_the_same_offsets_compare_equal_whenever_they_were_taken() -> None:
    first = LagSnapshot(group_id="g", taken_at=1.0, lags={"t": [1, 2]})
    assert comparable(first) == comparable(replace(first, taken_at=9.0))
    assert comparable(first) != comparable(replace(first, lags={"t": [1, 3]}))


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky", "failover"])
def test_a_kafka_assignor_or_failover_plans_on_counts(strategy: str) -> None:
    assert plans_on_counts(spec(strategy={"type": strategy}))


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"strategy": {"type": "lag"}}, id="lag-strategy"),
        pytest.param({"strategy": {"type": "balanced"}}, id="balanced"),
        pytest.param(
            {"consumers": {"autoscale": {"min": 1, "max": 3, "targetLagPerReplica": 10}}, "merge": False},
            id="autoscale",
        ),
        pytest.param({"targetTimeLagSeconds": 30}, id="time-lag-goal"),
        pytest.param({"kafka": {"clusterRef": {"name": "prod"}}, "merge": False}, id="cluster"),
        pytest.param({"consumers": {"delivery": "native"}}, id="native"),
        pytest.param({"dryRun": True}, id="dry-run"),
    ],
)
def test_a_policy_whose_decisions_or_status_read_lag_does_not_plan_on_counts(changes: dict[str, Any]) -> None:
    assert not plans_on_counts(spec(**changes))


def test_a_policy_that_plans_on_counts_settles_while_its_time_lag_moves() -> None:
    """Its time lag reaches status at the figures' pace, not at every tick."""
    assert reason(time_lag_known=True, spec=spec(strategy={"type": "range"})) is None


SNAPSHOT = LagSnapshot(group_id="g", taken_at=1.0, lags={"t": [1, 2], "u": [5]})
STALLED = frozenset({(T("t", 0), PartitionState.STALL)})


def test_reads_whose_lag_moved_have_one_shape() -> None:
    moved = replace(SNAPSHOT, taken_at=2.0, lags={"t": [900, 0], "u": [7]})
    assert shape_of(SNAPSHOT, STALLED) == shape_of(moved, STALLED)
    assert shape_of(SNAPSHOT, None) == shape_of(moved, None)


@pytest.mark.parametrize(
    ("other", "stuck"),
    [
        pytest.param(replace(SNAPSHOT, lags={"t": [1, 2, 0], "u": [5]}), STALLED, id="partitions-added"),
        pytest.param(replace(SNAPSHOT, lags={"t": [1, 2]}, missing_topics=("u",)), STALLED, id="topic-gone"),
        pytest.param(replace(SNAPSHOT, topics_without_series=("u",)), STALLED, id="no-series"),
        pytest.param(
            replace(SNAPSHOT, partition_racks={"t": [frozenset({"a"}), frozenset({"b"})]}),
            STALLED,
            id="racks",
        ),
        pytest.param(SNAPSHOT, frozenset(), id="stall-ended"),
        pytest.param(SNAPSHOT, frozenset({(T("t", 0), PartitionState.STOP)}), id="stall-became-stop"),
        pytest.param(SNAPSHOT, None, id="windows-gone"),
    ],
)
def test_what_a_count_plan_or_its_status_uses_changes_the_shape(
    other: LagSnapshot, stuck: frozenset[tuple[TopicPartition, PartitionState]] | None
) -> None:
    assert shape_of(SNAPSHOT, STALLED) != shape_of(other, stuck)
