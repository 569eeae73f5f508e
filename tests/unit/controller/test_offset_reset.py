"""Offset-reset requests (controller/offset_reset.py) and the reset table (lag/reset.py): what a
request may say, which partitions it pauses, and the new offsets, clamped as Kafka's tool does."""

from __future__ import annotations

import json

import pytest

from groupops.controller.offset_reset import (
    ResetRequestError,
    paused_partitions,
    pending,
    read_request,
    still_held,
)
from groupops.lag.base import PartitionOffsets
from groupops.lag.kafka import GroupOffsets
from groupops.lag.reset import ResetKind, ResetTarget, plan_reset
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release

NOTE = "groupops.dev/reset-offsets"
TOPICS = {"orders": 3, "refunds": 2}


def request(**fields: object) -> dict[str, str]:
    return {NOTE: json.dumps({"id": "r-1", "to": "earliest", **fields})}


def test_no_annotation_is_no_request_and_a_final_state_ends_one() -> None:
    assert read_request({}) is None
    asked = read_request(request(execute=True))
    assert asked is not None and asked.execute and asked.target == ResetTarget(ResetKind.EARLIEST)
    assert pending(asked, {})
    assert pending(asked, {"offsetReset": {"id": "r-1", "state": "Pausing"}})
    assert not pending(asked, {"offsetReset": {"id": "r-1", "state": "Done"}})
    assert pending(asked, {"offsetReset": {"id": "r-0", "state": "Done"}})


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        pytest.param({NOTE: "{"}, NOTE, id="not-json"),
        pytest.param({NOTE: "[1]"}, NOTE, id="not-an-object"),
        pytest.param(request(id=""), f"{NOTE}.id", id="empty-id"),
        pytest.param(request(to="yesterday"), f"{NOTE}.to", id="unknown-target"),
        pytest.param(request(to="offset"), f"{NOTE}.value", id="offset-without-value"),
        pytest.param(request(to="offset", value=-3), f"{NOTE}.value", id="negative-offset"),
        pytest.param(request(to="shift", value="5"), f"{NOTE}.value", id="shift-not-a-number"),
        pytest.param(request(topics={"orders": [0, -1]}), f"{NOTE}.topics.orders", id="negative-partition"),
        pytest.param(request(topics=5), f"{NOTE}.topics", id="topics-not-a-list"),
    ],
)
def test_a_malformed_request_names_its_field(annotations: dict[str, str], field: str) -> None:
    with pytest.raises(ResetRequestError) as caught:
        read_request(annotations)
    assert caught.value.field == field


def test_the_partitions_paused_are_the_ones_asked_for_and_exist() -> None:
    everything = read_request(request())
    assert everything is not None
    assert len(paused_partitions(everything, TOPICS)) == 5
    some = read_request(request(topics={"orders": [2, 0], "refunds": None}))
    assert some is not None
    assert paused_partitions(some, TOPICS) == [
        TopicPartition("orders", 0),
        TopicPartition("orders", 2),
        TopicPartition("refunds", 0),
        TopicPartition("refunds", 1),
    ]
    for wrong in ({"payments": None}, {"orders": [3]}):
        bad = read_request(request(topics=wrong))
        assert bad is not None
        with pytest.raises(ResetRequestError):
            paused_partitions(bad, TOPICS)


def test_a_partition_is_held_while_owned_or_being_released() -> None:
    tp0, tp1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    plan = PublishedPlan(
        plan=Plan(epoch=4, strategy="range", assignment={MemberId("a"): (tp0,)}),
        releasing={tp1: Release(identity=MemberId("b"), epoch=4)},
    )
    assert still_held(plan, [tp0, tp1]) == [tp0, tp1]
    free = PublishedPlan(plan=Plan(epoch=5, strategy="range", assignment={MemberId("a"): ()}))
    assert still_held(free, [tp0, tp1]) == []


def offsets(**committed: int | None) -> GroupOffsets:
    """Partition p of `orders` has its log from 10 to 100."""
    return GroupOffsets(
        group_id="g",
        group_known=True,
        group_state="Empty",
        taken_at=0.0,
        partitions={"orders": len(committed)},
        partition_racks={},
        offsets={
            TopicPartition("orders", int(name[1:])): PartitionOffsets(
                log_start=10, log_end=100, committed=value
            )
            for name, value in committed.items()
        },
    )


@pytest.mark.parametrize(
    ("target", "by_time", "expected"),
    [
        (ResetTarget(ResetKind.EARLIEST), None, [10, 10]),
        (ResetTarget(ResetKind.LATEST), None, [100, 100]),
        (ResetTarget(ResetKind.SHIFT, -30), None, [20, 10]),  # p1 has no commit: from the log start
        (ResetTarget(ResetKind.SHIFT, 500), None, [100, 100]),
        (ResetTarget(ResetKind.OFFSET, 5), None, [10, 10]),
        (ResetTarget(ResetKind.OFFSET, 60), None, [60, 60]),
        (ResetTarget(ResetKind.DATETIME, 1), {0: 42, 1: -1}, [42, 100]),
    ],
)
def test_the_new_offsets_follow_kafkas_tool_clamped_to_the_log(
    target: ResetTarget, by_time: dict[int, int] | None, expected: list[int]
) -> None:
    partitions = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    times = None if by_time is None else {TopicPartition("orders", p): o for p, o in by_time.items()}
    rows = plan_reset(offsets(p0=50, p1=None), partitions, target, times)
    assert [row.after for row in rows] == expected
    assert [row.before for row in rows] == [50, None]
