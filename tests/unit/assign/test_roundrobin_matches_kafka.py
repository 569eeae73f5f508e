"""`roundrobin` gives Apache Kafka's RoundRobinAssignor answers: seed 004 (Kafka's javadoc), the one
cursor that is never reset between topics, Java's member and topic order, static membership, and
racks ignored (KIP-881 left RoundRobin alone).

Every expected answer below is Kafka's own (kafka-clients 4.3.1, run through tools/kafka-assignors
on the same JSON input); tests/differential/test_matches_kafka.py compares thousands more.
An answer "t0p0 t1p2" lists a member's partitions in order.
"""

from __future__ import annotations

import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import GroupInput, Member, MemberId, TopicPartition

assign = get_strategy("roundrobin")


def member(member_id: str, *topics: str, instance: str | None = None, rack: str | None = None) -> Member:
    return Member(
        member_id=MemberId(member_id), topics=frozenset(topics), group_instance_id=instance, rack=rack
    )


def group(topics: dict[str, int], *members: Member) -> GroupInput:
    return GroupInput(topics=topics, members=members)


def answer(assignment: dict[MemberId, list[TopicPartition]]) -> dict[str, str]:
    return {m: " ".join(f"{tp.topic}p{tp.partition}" for tp in tps) for m, tps in assignment.items()}


def spelled(expected: dict[str, str]) -> dict[str, str]:
    return {m: " ".join(expected[m].split()) for m in expected}


CASES = [
    pytest.param(
        group({"t0": 3, "t1": 3}, member("C0", "t0", "t1"), member("C1", "t0", "t1")),
        {"C0": "t0p0 t0p2 t1p1", "C1": "t0p1 t1p0 t1p2"},
        id="seed-004-identical-subscriptions",
    ),
    pytest.param(
        group(
            {"t0": 1, "t1": 2, "t2": 3},
            member("C0", "t0"),
            member("C1", "t0", "t1"),
            member("C2", "t0", "t1", "t2"),
        ),
        {"C0": "t0p0", "C1": "t1p0", "C2": "t1p1 t2p0 t2p1 t2p2"},
        id="seed-004-unequal-subscriptions-skip-non-subscribers",
    ),
    pytest.param(
        group({"t0": 3, "t1": 3}, *(member(m, "t0", "t1") for m in ("C0", "C1", "C2"))),
        {"C0": "t0p0 t1p0", "C1": "t0p1 t1p1", "C2": "t0p2 t1p2"},
        id="seed-004-dynamic-members-by-member-id",
    ),
    pytest.param(
        group({"t0": 3, "t1": 3}, *(member(m, "t0", "t1") for m in ("C5", "C3", "C4"))),
        {"C3": "t0p0 t1p0", "C4": "t0p1 t1p1", "C5": "t0p2 t1p2"},
        id="seed-004-new-member-ids-reshuffle-dynamic-members",
    ),
    pytest.param(
        group({"t0": 1, "t1": 3}, *(member(m, "t0", "t1") for m in ("C0", "C1", "C2"))),
        {"C0": "t0p0 t1p2", "C1": "t1p0", "C2": "t1p1"},
        id="cursor-not-reset-between-topics",
    ),
    pytest.param(
        group({"a": 2, "b": 2}, member("C0", "a"), member("C1", "b"), member("C2", "a", "b")),
        {"C0": "ap0", "C1": "bp0", "C2": "ap1 bp1"},
        id="cursor-skips-to-next-subscriber-and-wraps",
    ),
    pytest.param(
        group(
            {"t0": 2, "empty": 0, "t1": 2},
            member("C0", "t0", "empty", "t1"),
            member("C1", "t0", "empty", "t1"),
        ),
        {"C0": "t0p0 t1p0", "C1": "t0p1 t1p1"},
        id="topic-without-partitions-does-not-move-the-cursor",
    ),
    pytest.param(
        group({"t0": 4}, member("a", "t0"), member("B", "t0"), member("c", "t0")),
        {"B": "t0p0 t0p3", "a": "t0p1", "c": "t0p2"},
        id="java-order-uppercase-before-lowercase",
    ),
    pytest.param(
        group({"t0": 3}, member("consumer2", "t0"), member("consumer10", "t0")),
        {"consumer10": "t0p0 t0p2", "consumer2": "t0p1"},
        id="java-order-consumer10-before-consumer2",
    ),
    pytest.param(
        group(
            {"\uff5a": 1, "\U0001d518": 1},
            member("C0", "\uff5a", "\U0001d518"),
            member("C1", "\uff5a", "\U0001d518"),
        ),
        {"C0": "\U0001d518p0", "C1": "\uff5ap0"},
        id="java-topic-order-surrogates-before-fullwidth-z",
    ),
    pytest.param(
        group(
            {"t0": 3, "t1": 3},
            member("C0", "t0", "t1", instance="I2"),
            member("C1", "t0", "t1", instance="I0"),
            member("C2", "t0", "t1", instance="I1"),
        ),
        {"C1": "t0p0 t1p0", "C2": "t0p1 t1p1", "C0": "t0p2 t1p2"},
        id="seed-004-static-members-by-instance-id",
    ),
    pytest.param(
        group({"t0": 3}, member("A", "t0"), member("Z", "t0", instance="I9")),
        {"Z": "t0p0 t0p2", "A": "t0p1"},
        id="static-members-before-dynamic-ones",
    ),
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="b"), member("C1", "t0", rack="a")),
        {"C0": "t0p0 t0p2", "C1": "t0p1 t0p3"},
        id="racks-ignored",
    ),
    pytest.param(
        group({"t0": 2}, member("C0", "t0"), member("C1")),
        {"C0": "t0p0 t0p1", "C1": ""},
        id="member-with-no-subscription-gets-nothing",
    ),
]


@pytest.mark.parametrize(("group_input", "expected"), CASES)
def test_roundrobin_gives_kafkas_answer(group_input: GroupInput, expected: dict[str, str]) -> None:
    assignment = assign(group_input)
    check_assignment(group_input, assignment)
    assert answer(assignment) == spelled(expected)


def test_static_members_keep_their_partitions_when_member_ids_are_reshuffled() -> None:
    """Seed 004: I0..I2 keep [t0p0, t1p0], [t0p1, t1p1], [t0p2, t1p2] whatever ids they get."""
    expected = {"I0": "t0p0 t1p0", "I1": "t0p1 t1p1", "I2": "t0p2 t1p2"}
    for member_ids in (("C0", "C1", "C2"), ("C5", "C3", "C4"), ("z", "B", "a")):
        members = [member(m, "t0", "t1", instance=f"I{i}") for i, m in enumerate(member_ids)]
        static = group({"t0": 3, "t1": 3}, *members)
        assignment = assign(static)
        check_assignment(static, assignment)
        by_instance = {str(m.group_instance_id): assignment[m.member_id] for m in members}
        assert answer({MemberId(k): v for k, v in by_instance.items()}) == expected


def test_owned_partitions_and_racks_do_not_matter() -> None:
    plain = group({"t0": 4, "t1": 1}, member("C0", "t0", "t1"), member("C1", "t0"))
    decorated = GroupInput(
        topics=plain.topics,
        members=tuple(
            Member(
                member_id=m.member_id,
                topics=m.topics,
                owned=(TopicPartition("t0", 3),) if m.member_id == "C0" else (),
                generation=7,
                rack="r1",
            )
            for m in plain.members
        ),
        partition_racks={"t0": tuple(frozenset({f"r{p % 2}"}) for p in range(4)), "t1": (frozenset({"r1"}),)},
    )
    assert assign(decorated) == assign(plain)


def test_no_members_gives_an_empty_assignment() -> None:
    """Kafka's RoundRobinAssignor throws on an empty group; ours answers with no entries."""
    assert assign(group({"t0": 3})) == {}
