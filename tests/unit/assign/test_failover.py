"""`failover` (seed 001): everything to the highest priority; the rest are hot standbys."""

from __future__ import annotations

import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import AssignOptions, GroupInput, Member, MemberId, TopicPartition

TOPICS = {"orders": 3, "refunds": 1}
ALL = [
    TopicPartition("orders", 0),
    TopicPartition("orders", 1),
    TopicPartition("orders", 2),
    TopicPartition("refunds", 0),
]


def member(
    member_id: str, priority: int, *, instance: str | None = None, owned: tuple[TopicPartition, ...] = ()
) -> Member:
    return Member(
        member_id=MemberId(member_id),
        topics=frozenset(TOPICS),
        priority=priority,
        group_instance_id=instance,
        owned=owned,
    )


def run(*members: Member, failback: bool = True) -> dict[MemberId, list[TopicPartition]]:
    group = GroupInput(topics=TOPICS, members=members, options=AssignOptions(failback=failback))
    assignment = get_strategy("failover")(group)
    check_assignment(group, assignment)
    return assignment


@pytest.mark.parametrize(
    ("members", "active"),
    [
        pytest.param(
            (member("A", 10), member("B", 20), member("C", 5)), "B", id="highest-priority-takes-all"
        ),
        pytest.param((member("A", 10), member("C", 5)), "A", id="next-priority-after-the-active-is-gone"),
        pytest.param((member("b", 7), member("B", 7)), "B", id="tie-first-in-java-string-order"),
        pytest.param(
            (member("m1", 7, instance="orders-1"), member("m0", 7, instance="orders-2"), member("a", 7)),
            "m1",
            id="tie-static-members-first-by-instance-id",
        ),
        pytest.param((member("A", -5), member("B", -1)), "B", id="negative-priorities"),
    ],
)
def test_failover_gives_every_partition_to_one_member(members: tuple[Member, ...], active: str) -> None:
    assignment = run(*members)
    assert assignment[MemberId(active)] == ALL
    assert all(not tps for member_id, tps in assignment.items() if member_id != active)


def test_failover_by_topic_only_to_subscribers() -> None:
    only_orders = Member(member_id=MemberId("top"), topics=frozenset({"orders"}), priority=100)
    group = GroupInput(topics=TOPICS, members=(only_orders, member("low", 1)))
    assignment = get_strategy("failover")(group)
    check_assignment(group, assignment)
    assert assignment == {"top": ALL[:3], "low": ALL[3:]}


def test_without_failback_the_current_owner_keeps_the_partitions() -> None:
    returning = member("A", 100)
    current = member("B", 50, owned=tuple(ALL))
    assert run(returning, current, failback=False)[MemberId("B")] == ALL
    assert run(returning, current, failback=True)[MemberId("A")] == ALL
