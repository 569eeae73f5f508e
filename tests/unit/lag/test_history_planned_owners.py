"""The operator's offset history names an owner for every partition a replica holds, also with
delivery plan, whose replicas never join the Kafka group (DescribeGroups names nobody): the rows
then carry the published plan's identities, so the Spark `plan` job has members to plan for. When
Kafka does report members, its owners win."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from groupops.lag.base import GroupAssignment, PartitionOffsets
from groupops.lag.history import OffsetHistory, PlannedOwners, SnapshotRow
from groupops.lag.kafka import GroupOffsets
from groupops.model import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
PLAN = {T0: "orders-0", T1: "orders-1"}


class MemorySink:
    def __init__(self) -> None:
        self.rows: list[SnapshotRow] = []

    def write(self, rows: Sequence[SnapshotRow]) -> None:
        self.rows.extend(rows)


class HistoryInMemory(OffsetHistory):
    """The real `record` (rows_from_offsets and its owners rule) with rows kept in memory."""

    def __init__(self) -> None:
        super().__init__("groupops-offsets")
        self.sink = MemorySink()

    def _sink(self, bootstrap: str, client_config: Mapping[str, str]) -> Any:
        return self.sink


def offsets(members: Mapping[str, tuple[TopicPartition, ...]] | None) -> GroupOffsets:
    return GroupOffsets(
        group_id="orders",
        group_known=True,
        group_state="Empty" if not members else "Stable",
        taken_at=1_700_000_000.0,
        partitions={"t": 2},
        partition_racks={},
        offsets={
            T0: PartitionOffsets(log_start=0, log_end=10, committed=5),
            T1: PartitionOffsets(log_start=0, log_end=10, committed=10),
        },
        assignment=None
        if members is None
        else GroupAssignment(group_id="orders", state="Stable", members=members),
    )


def members_of(history: HistoryInMemory) -> dict[TopicPartition, str | None]:
    return {TopicPartition(r["topic"], r["partition"]): r["member"] for r in history.sink.rows}


def test_a_plan_delivered_group_names_the_plans_owners() -> None:
    history = HistoryInMemory()
    assert PlannedOwners(history, PLAN).record(offsets({}), bootstrap="k:9092", client_config={}) == 2
    assert members_of(history) == PLAN


def test_a_partition_the_plan_leaves_unowned_reads_nobody() -> None:
    history = HistoryInMemory()
    PlannedOwners(history, {T0: "orders-0"}).record(offsets({}), bootstrap="k:9092", client_config={})
    assert members_of(history) == {T0: "orders-0", T1: ""}


def test_members_kafka_reports_win_over_the_plan() -> None:
    history = HistoryInMemory()
    kafka = {"orders-1": (T0, T1)}
    PlannedOwners(history, PLAN).record(offsets(kafka), bootstrap="k:9092", client_config={})
    assert members_of(history) == {T0: "orders-1", T1: "orders-1"}


def test_without_the_plan_an_empty_group_names_nobody() -> None:
    history = HistoryInMemory()
    history.record(offsets({}), bootstrap="k:9092", client_config={})
    assert members_of(history) == {T0: "", T1: ""}
