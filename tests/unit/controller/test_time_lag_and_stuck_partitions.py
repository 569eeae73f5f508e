"""Time lag and stuck partitions through the reconcile (controller/lagstate.py), run by run against
an in-memory API: a `kafka` policy's reads (10 s apart) feed its windows; status, the metrics and
the Events say how far behind each member and the group are, and which partitions are STALL, STOP
or REWIND; a stalled partition on a live replica is handed to another once; a stopped group is
reported, not replanned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import pytest

from groupops.controller.lagstate import kept_away
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import PolicyMemory
from groupops.controller.render_plan import read_plan_configmap
from groupops.controller.settings import ReconcileSettings, Settings
from groupops.controller.spec import SpecError, parse_policy
from groupops.lag import LagSnapshot, PartitionOffsets
from groupops.lag.registry import SourceContext
from groupops.model import MemberId, TopicPartition
from groupops.planner.plan_format import (
    LeaseRecord,
    LeaseState,
    PublishedPlan,
    format_micro_time,
    lease_record_annotations,
)
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.reconcile_support import reconcile_with_readers
from tests.unit.controller.test_reconcile_steps import Clock

READ_EVERY_S = 10.0
RATE = 10
"""Messages per second produced to every partition that is not idle."""
BEHIND = 50
"""Messages behind of every partition that keeps up: 5 s of time lag at RATE."""

KAFKA: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "g",
    "topics": ["t"],
    "strategy": {"type": "lag"},
    "lagSource": {"type": "kafka", "kafka": {}},
    # Stuck after 10 s of standstill: one read interval.
    "consumers": {"replicas": 3, "maxPollIntervalSeconds": 10},
}
STATIC: dict[str, Any] = {**KAFKA, "lagSource": {"type": "static", "static": {"lags": {"t": [5, 5, 5]}}}}
POLICY = {"namespace": "ns", "policy": "p"}
STUCK_REASONS = ("PartitionStalled", "GroupStopped", "OffsetRewound")


class Partitions:
    """Stands in for `KafkaClusterReaders`: three partitions of topic t, produced to at RATE and
    consumed BEHIND messages behind, except those the test makes idle (nothing produced),
    `standing` (the position does not move) or rewinds. Each read is the moment `t`."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0
        self.log_end = [1_000, 1_000, 1_000]
        self.committed = [950, 950, 950]
        self.standing: set[int] = set()
        self.idle: set[int] = set()

    def source(self, spec: Any, context: SourceContext) -> Partitions:
        return self

    def close(self) -> None:
        pass

    def advance(self) -> None:
        self.t += READ_EVERY_S
        for p in range(3):
            if p not in self.idle:
                self.log_end[p] += int(RATE * READ_EVERY_S)
            if p not in self.standing:
                self.committed[p] = self.log_end[p] - BEHIND

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        offsets = {
            TopicPartition("t", p): PartitionOffsets(
                log_start=0, log_end=self.log_end[p], committed=self.committed[p]
            )
            for p in range(3)
        }
        lags = {"t": [self.log_end[p] - self.committed[p] for p in range(3)]}
        return LagSnapshot(group_id=group_id, taken_at=self.t, lags=lags, offsets=offsets)


EVERY_FIGURE_WRITTEN = replace(Settings(), reconcile=ReconcileSettings(status_figures_seconds=0))
"""This world's clock is not the monotonic one that paces figures-only status writes
(test_status_figures_paced.py): every run here writes its figures."""


class World:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.kube, self.clock, self.memory, self.metrics = FakeKube(), Clock(), PolicyMemory(), Metrics()
        self.partitions = Partitions()
        self.kube.put_policy("ns", "p", spec)

    def run(self) -> Any:
        result = reconcile_with_readers(
            self.kube,
            self.partitions,
            self.memory,
            metrics=self.metrics,
            wall_clock=self.clock,
            settings=EVERY_FIGURE_WRITTEN,
        )
        self.clock.advance(1)
        return result

    def tick(self) -> Any:
        """The next read, 10 s later, and a reconcile that takes it."""
        self.partitions.advance()
        return self.run()

    @property
    def status(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.kube.policy("ns", "p")["status"])

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, {**POLICY, **labels})

    def warnings(self) -> list[tuple[str, str]]:
        """The stuck-partition Events posted so far, oldest first (all are Warnings)."""
        events = [event for (kind, _, _), event in self.kube.objects.items() if kind == "Event"]
        return [
            (event["reason"], event["message"])
            for event in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))
            if event["reason"] in STUCK_REASONS and event["type"] == "Warning"
        ]

    def plan(self) -> PublishedPlan:
        observed = read_plan_configmap(self.kube.get("v1", "ConfigMap", "ns", "p-plan"))
        assert observed is not None
        return observed.published

    def owner_of(self, partition: int) -> str:
        tp = TopicPartition("t", partition)
        return next(str(i) for i, tps in self.plan().plan.assignment.items() if tp in tps)

    def acknowledge(self, stopped: Mapping[str, tuple[tuple[TopicPartition, int], ...]] = {}) -> None:
        """Every replica holds its Lease, renews it and has applied the published plan (and
        reports the partitions it `stopped` on a failing message)."""
        plan = self.plan()
        for identity in ("g-0", "g-1", "g-2"):
            record = LeaseRecord(
                acked_epoch=plan.epoch,
                partitions=tuple(plan.plan.assignment.get(MemberId(identity), ())),
                state=LeaseState.ACTIVE,
                stopped=stopped.get(identity, ()),
            )
            self.kube.patch(
                "coordination.k8s.io/v1",
                "Lease",
                "ns",
                f"p-{identity}",
                {
                    "metadata": {"annotations": lease_record_annotations(record, identity)},
                    "spec": {
                        "holderIdentity": f"{identity}-process",
                        "renewTime": format_micro_time(self.clock.now.timestamp()),
                    },
                },
            )


def running(spec: dict[str, Any] = KAFKA) -> World:
    """A policy whose three replicas run and have applied epoch 1."""
    world = World(spec)
    world.run()
    world.acknowledge()
    return world


# -- time lag ---------------------------------------------------------------------------------------


def test_time_lag_of_each_member_and_the_group_in_status_and_metrics() -> None:
    world = running()
    world.tick()
    status = world.status
    assert status["timeLagSeconds"] == pytest.approx(BEHIND / RATE)
    assert [m["timeLagSeconds"] for m in status["members"]] == [pytest.approx(BEHIND / RATE)] * 3
    assert world.value("groupops_time_lag_seconds") == pytest.approx(BEHIND / RATE)
    assert world.value("groupops_member_time_lag_seconds", identity="g-1") == pytest.approx(BEHIND / RATE)
    assert "stuckPartitions" not in status
    assert world.value("groupops_partition_status", state="OK") == 3
    assert world.value("groupops_partition_status", state="STALL") == 0


def test_an_idle_topic_with_a_backlog_is_at_least_the_windows_age_behind() -> None:
    world = running()
    world.partitions.idle = {0, 1, 2}
    world.partitions.standing = {0, 1, 2}
    for _ in range(3):
        world.tick()
    assert world.status["timeLagSeconds"] == pytest.approx(3 * READ_EVERY_S), "not 0: it has lag"


@pytest.mark.parametrize(
    ("goal", "met"),
    [pytest.param(10, True, id="within-the-goal"), pytest.param(2.5, False, id="behind-the-goal")],
)
def test_the_time_lag_goal_says_whether_it_is_met(goal: float, met: bool) -> None:
    world = running({**KAFKA, "targetTimeLagSeconds": goal})
    world.tick()
    assert world.status["timeLagGoal"] == {"targetSeconds": goal, "met": met}
    assert world.value("groupops_time_lag_goal_seconds") == goal  # the alert's goal line


def test_without_a_goal_there_is_no_goal_series() -> None:
    world = running()
    world.tick()
    assert world.value("groupops_time_lag_seconds") is not None
    assert world.value("groupops_time_lag_goal_seconds") is None


@pytest.mark.parametrize(
    "goal",
    [pytest.param(0, id="zero"), pytest.param(-5, id="negative"), pytest.param(10**6, id="over-a-week")],
)
def test_the_goal_is_a_positive_number_of_seconds_at_most_a_week(goal: float) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy({**KAFKA, "targetTimeLagSeconds": goal})
    assert caught.value.field == "spec.targetTimeLagSeconds"
    assert "seconds > 0 (at most a week)" in caught.value.message


def test_a_source_without_offsets_has_no_time_lag_and_the_goal_says_nothing_of_it() -> None:
    world = running({**STATIC, "targetTimeLagSeconds": 30})
    world.run()
    status = world.status
    assert "timeLagSeconds" not in status and "stuckPartitions" not in status
    assert all("timeLagSeconds" not in m for m in status["members"])
    assert status["timeLagGoal"] == {"targetSeconds": 30}
    assert world.value("groupops_time_lag_seconds") is None
    assert world.value("groupops_partition_status", state="OK") is None


def test_a_deleted_policys_time_lag_series_are_forgotten() -> None:
    world = running({**KAFKA, "targetTimeLagSeconds": 10})
    world.tick()
    assert world.value("groupops_time_lag_goal_seconds") == 10
    world.metrics.forget("ns", "p")
    assert world.value("groupops_time_lag_goal_seconds") is None
    assert world.value("groupops_time_lag_seconds") is None
    assert world.value("groupops_member_time_lag_seconds", identity="g-0") is None
    assert world.value("groupops_partition_status", state="OK") is None


# -- stuck partitions -------------------------------------------------------------------------------


def test_a_stalled_partition_is_reported_once_and_handed_to_another_live_replica_once() -> None:
    world = running()  # the first read: every position BEHIND its log end
    stalled = world.owner_of(1)
    world.partitions.standing, world.partitions.idle = {1}, {1}  # its lag stays BEHIND: no imbalance
    world.tick()  # 10 s of standstill under lag, the owner live: STALL, and it is handed away
    assert world.status["stuckPartitions"] == [
        {"topic": "t", "partition": 1, "state": "STALL", "identity": stalled}
    ]
    assert world.value("groupops_partition_status", state="STALL") == 1
    assert [reason for reason, _ in world.warnings()] == ["PartitionStalled"]
    assert f"t-1 ({stalled})" in world.warnings()[0][1]
    plan = world.plan()
    assert plan.releasing[TopicPartition("t", 1)].identity == stalled, "its owner lets it go"
    assert world.value("groupops_rebalances_total", trigger="PartitionStalled") == 1

    world.tick()  # still standing, while its owner releases it: no new Event, no second move
    world.acknowledge()
    world.tick()
    world.tick()
    assert world.owner_of(1) != stalled
    assert [reason for reason, _ in world.warnings()] == ["PartitionStalled"]
    assert world.value("groupops_rebalances_total", trigger="PartitionStalled") == 1, "once per stall"

    world.partitions.standing, world.partitions.idle = set(), set()
    world.tick()  # its new owner moves it on: OK again
    assert "stuckPartitions" not in world.status
    assert world.value("groupops_partition_status", state="STALL") == 0


def test_with_manual_approval_a_stalled_partition_is_reported_not_moved() -> None:
    world = running({**KAFKA, "rebalance": {"approval": "manual"}})
    world.partitions.standing, world.partitions.idle = {1}, {1}
    world.tick()
    world.tick()
    assert [entry["state"] for entry in world.status["stuckPartitions"]] == ["STALL"]
    (warning,) = world.warnings()
    assert warning[0] == "PartitionStalled" and "not moved" in warning[1]
    assert world.plan().epoch == 1
    assert world.value("groupops_rebalances_total", trigger="PartitionStalled") is None


def test_a_partition_its_replica_stopped_on_a_failing_message_is_handed_away_once() -> None:
    # A window of 300 s: the replica's own report moves it at once, long before a STALL verdict.
    world = World({**KAFKA, "consumers": {"replicas": 3, "maxPollIntervalSeconds": 300}})
    world.run()
    failing = TopicPartition("t", 1)
    first = world.owner_of(1)
    world.acknowledge(stopped={first: ((failing, 950),)})
    world.partitions.standing, world.partitions.idle = {1}, {1}
    world.tick()
    assert "stuckPartitions" not in world.status, "not STALL yet: the window has not passed"
    assert world.plan().releasing[failing].identity == first, "its replica lets it go"
    assert world.value("groupops_rebalances_total", trigger="PartitionStalled") == 1

    world.acknowledge()
    world.tick()
    second = world.owner_of(1)
    assert second != first
    world.acknowledge(stopped={second: ((failing, 950),)})  # it fails there too: poison, not a replica
    for _ in range(3):
        world.tick()
    assert world.owner_of(1) == second and world.plan().releasing == {}
    assert world.value("groupops_rebalances_total", trigger="PartitionStalled") == 1, "moved once"


def test_a_stopped_partition_the_next_replica_processes_is_placed_freely_again() -> None:
    world = World(KAFKA)
    world.run()
    failing = TopicPartition("t", 1)
    first = world.owner_of(1)
    world.acknowledge(stopped={first: ((failing, 950),)})
    world.partitions.standing, world.partitions.idle = {1}, {1}
    world.tick()
    world.acknowledge()
    world.tick()
    assert world.owner_of(1) != first
    world.partitions.standing, world.partitions.idle = set(), set()  # the next replica got past it
    world.tick()
    assert world.memory.stall_handoffs == {}, "the standstill ended: nothing is kept away"


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        pytest.param(
            {"g-0": [0, 3], "g-1": [1], "g-2": [2]},
            {"g-0": [2, 3], "g-1": [1], "g-2": [0]},
            id="swapped-with-the-partition-closest-in-lag",
        ),
        pytest.param(
            {"g-0": [0, 3], "g-1": [1, 2], "g-2": []},
            {"g-0": [3], "g-1": [1, 2], "g-2": [0]},
            id="a-standby-takes-it",
        ),
        pytest.param(
            {"g-0": [0, 1, 2, 3], "g-1": [], "g-2": []},
            {"g-0": [1, 2, 3], "g-1": [0], "g-2": []},
            id="standbys-by-name",
        ),
        pytest.param(
            {"g-1": [0, 1, 2, 3], "g-0": []},
            {"g-1": [0, 1, 2, 3], "g-0": []},
            id="already-away",
        ),
    ],
)
def test_a_stalled_partition_is_kept_away_from_its_replica(
    base: dict[str, list[int]], expected: dict[str, list[int]]
) -> None:
    lags = {TopicPartition("t", p): lag for p, lag in enumerate([90, 10, 80, 30])}
    tps = {identity: tuple(TopicPartition("t", p) for p in ps) for identity, ps in base.items()}
    kept, _ = kept_away(tps, {TopicPartition("t", 0): (1.0, "g-0")}, {"g-0", "g-1", "g-2"}, lags)
    assert {i: [tp.partition for tp in kept[i]] for i in expected} == expected


def test_a_group_without_live_replicas_is_stopped_and_reported_not_replanned() -> None:
    world = World(KAFKA)  # the pods never start: no Lease is ever taken
    world.partitions.standing = {0, 1, 2}
    world.run()
    world.tick()
    epoch = world.plan().epoch
    world.tick()
    assert [entry["state"] for entry in world.status["stuckPartitions"]] == ["STOP"] * 3
    assert world.value("groupops_partition_status", state="STOP") == 3
    ((reason, message),) = world.warnings()
    assert reason == "GroupStopped" and "t-0" in message and "t-2" in message
    world.tick()
    assert world.plan().epoch == epoch, "a stopped group is not replanned"
    assert len(world.warnings()) == 1, "announced once"


def test_a_committed_offset_going_back_is_a_rewind() -> None:
    world = running()
    world.tick()
    world.partitions.committed[2] -= 500
    world.partitions.standing = {2}
    world.tick()
    assert world.status["stuckPartitions"] == [
        {"topic": "t", "partition": 2, "state": "REWIND", "identity": world.owner_of(2)}
    ]
    assert [reason for reason, _ in world.warnings()] == ["OffsetRewound"]


def test_a_new_leader_does_not_announce_again_what_status_already_lists() -> None:
    world = World(KAFKA)
    world.partitions.standing = {0, 1, 2}
    world.run()
    world.tick()
    assert len(world.warnings()) == 1
    world.memory = PolicyMemory()  # another operator takes over, with the status as it was
    world.run()
    world.tick()
    world.tick()
    assert len(world.warnings()) == 1
