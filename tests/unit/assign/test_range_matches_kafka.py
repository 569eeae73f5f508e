"""`range` gives Apache Kafka's RangeAssignor answers: the seeds' examples, Kafka's javadoc, Java's
member order, and KIP-881 rack-aware assignment.

Every expected answer below is Kafka's own (kafka-clients 4.3.1, run through tools/kafka-assignors
on the same JSON input); tests/differential/test_matches_kafka.py compares thousands more.
Notation: racks "a b,c -" = partition 0 on rack a, partition 1 on racks b and c, partition 2 on
none; an answer "t0p0 t1p2" lists a member's partitions in order.
"""

from __future__ import annotations

import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import GroupInput, Member, MemberId, TopicPartition

assign = get_strategy("range")


def member(member_id: str, *topics: str, instance: str | None = None, rack: str | None = None) -> Member:
    return Member(
        member_id=MemberId(member_id), topics=frozenset(topics), group_instance_id=instance, rack=rack
    )


def group(topics: dict[str, int], *members: Member, racks: dict[str, str] | None = None) -> GroupInput:
    replica_racks = {
        topic: tuple(frozenset() if spec == "-" else frozenset(spec.split(",")) for spec in layout.split())
        for topic, layout in (racks or {}).items()
    }
    return GroupInput(topics=topics, members=members, partition_racks=replica_racks)


def answer(assignment: dict[MemberId, list[TopicPartition]]) -> dict[str, str]:
    return {m: " ".join(f"{tp.topic}p{tp.partition}" for tp in tps) for m, tps in assignment.items()}


def spelled(expected: dict[str, str]) -> dict[str, str]:
    return {m: " ".join(expected[m].split()) for m in expected}


PLAIN_CASES = [
    pytest.param(
        group({"T1": 10}, member("C1-0", "T1"), member("C2-0", "T1"), member("C2-1", "T1")),
        {
            "C1-0": "T1p0 T1p1 T1p2 T1p3",
            "C2-0": "T1p4 T1p5 T1p6",
            "C2-1": "T1p7 T1p8 T1p9",
        },
        id="seed-003-ten-partitions-three-threads",
    ),
    pytest.param(
        group({"T1": 11}, member("C1-0", "T1"), member("C2-0", "T1"), member("C2-1", "T1")),
        {
            "C1-0": "T1p0 T1p1 T1p2 T1p3",
            "C2-0": "T1p4 T1p5 T1p6 T1p7",
            "C2-1": "T1p8 T1p9 T1p10",
        },
        id="seed-003-eleven-partitions-first-two-get-one-extra",
    ),
    pytest.param(
        group({"T1": 10, "T2": 10}, *(member(m, "T1", "T2") for m in ("C1-0", "C2-0", "C2-1"))),
        {
            "C1-0": "T1p0 T1p1 T1p2 T1p3 T2p0 T2p1 T2p2 T2p3",
            "C2-0": "T1p4 T1p5 T1p6 T2p4 T2p5 T2p6",
            "C2-1": "T1p7 T1p8 T1p9 T2p7 T2p8 T2p9",
        },
        id="seed-003-two-topics-repeat-the-split-first-thread-gets-two-extra",
    ),
    pytest.param(
        group({"t0": 3}, member("C0", "t0"), member("C1", "t0")),
        {"C0": "t0p0 t0p1", "C1": "t0p2"},
        id="seed-000-range-assignor-example",
    ),
    pytest.param(
        group({"t0": 3, "t1": 3}, member("C0", "t0", "t1"), member("C1", "t0", "t1")),
        {"C0": "t0p0 t0p1 t1p0 t1p1", "C1": "t0p2 t1p2"},
        id="kafka-javadoc-two-consumers-two-topics",
    ),
    pytest.param(
        group({"t0": 3, "t1": 2}, member("C1", "t0"), member("C2", "t0", "t1"), member("C3", "t0")),
        {"C1": "t0p0", "C2": "t0p1 t1p0 t1p1", "C3": "t0p2"},
        id="per-topic-subscribers-only",
    ),
    pytest.param(
        group({"t0": 1}, member("C0", "t0"), member("C1", "t0"), member("C2", "t0")),
        {"C0": "t0p0", "C1": "", "C2": ""},
        id="more-members-than-partitions-later-ones-get-none",
    ),
    pytest.param(
        group({"t0": 3, "empty": 0}, member("C0", "t0", "empty"), member("C1", "empty")),
        {"C0": "t0p0 t0p1 t0p2", "C1": ""},
        id="topic-with-no-partitions-and-member-with-nothing-to-take",
    ),
    pytest.param(
        group({"t0": 3}, member("a", "t0"), member("B", "t0")),
        {"B": "t0p0 t0p1", "a": "t0p2"},
        id="java-order-uppercase-before-lowercase",
    ),
    pytest.param(
        group({"t0": 3}, member("consumer2", "t0"), member("consumer10", "t0")),
        {"consumer10": "t0p0 t0p1", "consumer2": "t0p2"},
        id="java-order-consumer10-before-consumer2",
    ),
    pytest.param(
        group({"t0": 3}, member("\uff5a", "t0"), member("\U0001d518", "t0")),
        {"\U0001d518": "t0p0 t0p1", "\uff5a": "t0p2"},
        id="java-order-utf16-surrogates-before-fullwidth-z",
    ),
    pytest.param(
        group(
            {"t0": 3, "t1": 3},
            member("consumer-b", "t0", "t1", instance="instance1"),
            member("consumer-a", "t0", "t1"),
        ),
        {"consumer-b": "t0p0 t0p1 t1p0 t1p1", "consumer-a": "t0p2 t1p2"},
        id="static-member-before-dynamic-whatever-the-member-ids",
    ),
    pytest.param(
        group(
            {"t0": 3, "t1": 3},
            member("consumer-b", "t0", "t1", instance="instance1"),
            member("consumer-a", "t0", "t1", instance="instance2"),
        ),
        {"consumer-b": "t0p0 t0p1 t1p0 t1p1", "consumer-a": "t0p2 t1p2"},
        id="static-members-ordered-by-instance-id-not-member-id",
    ),
]

RACK_CASES = [
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="b"), member("C1", "t0", rack="a"), racks={"t0": "a b a b"}),
        {"C0": "t0p1 t0p3", "C1": "t0p0 t0p2"},
        id="rack-each-member-takes-its-racks-partitions",
    ),
    pytest.param(
        group(
            {"t0": 4},
            member("C0", "t0", rack="b"),
            member("C1", "t0", rack="a"),
            racks={"t0": "a,b a,b a,b a,b"},
        ),
        {"C0": "t0p0 t0p1", "C1": "t0p2 t0p3"},
        id="rack-off-when-every-partition-is-on-the-same-racks",
    ),
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="x"), member("C1", "t0", rack="y"), racks={"t0": "a b a b"}),
        {"C0": "t0p0 t0p1", "C1": "t0p2 t0p3"},
        id="rack-off-when-no-member-is-on-a-replica-rack",
    ),
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="b"), member("C1", "t0", rack="a")),
        {"C0": "t0p0 t0p1", "C1": "t0p2 t0p3"},
        id="rack-off-without-replica-racks",
    ),
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="a"), member("C1", "t0"), racks={"t0": "b a b a"}),
        {"C0": "t0p1 t0p3", "C1": "t0p0 t0p2"},
        id="rack-member-without-rack-takes-the-lowest-left",
    ),
    pytest.param(
        group({"t0": 4}, member("C0", "t0", rack="a"), member("C1", "t0", rack=""), racks={"t0": "b a b a"}),
        {"C0": "t0p1 t0p3", "C1": "t0p0 t0p2"},
        id="rack-empty-rack-id-counts-as-none",
    ),
    pytest.param(
        group(
            {"t0": 5}, member("C0", "t0", rack="a"), member("C1", "t0", rack="b"), racks={"t0": "a a a a b"}
        ),
        {"C0": "t0p0 t0p1 t0p2", "C1": "t0p3 t0p4"},
        id="rack-balance-before-locality",
    ),
    pytest.param(
        group(
            {"t1": 4, "t2": 4},
            member("C0", "t1", "t2", rack="a"),
            member("C1", "t1", "t2", rack="b"),
            racks={"t1": "b a b a", "t2": "b a b a"},
        ),
        {"C0": "t1p1 t1p3 t2p1 t2p3", "C1": "t1p0 t1p2 t2p0 t2p2"},
        id="rack-co-partitioned-topics-aligned-together",
    ),
    pytest.param(
        group(
            {"t1": 4, "t2": 4},
            member("C0", "t1", "t2", rack="a"),
            member("C1", "t1", "t2", rack="b"),
            racks={"t1": "b a b a", "t2": "a b a b"},
        ),
        {"C0": "t1p0 t1p1 t2p0 t2p1", "C1": "t1p2 t1p3 t2p2 t2p3"},
        id="rack-co-partitioning-wins-over-locality",
    ),
    pytest.param(
        group(
            {"t1": 4, "t2": 4, "t3": 2},
            member("C0", "t1", "t2", "t3", rack="c"),
            member("C1", "t1", "t2", "t3"),
            racks={"t1": "a,b a,b a,b a,b", "t2": "a,b a,b a,b a,b", "t3": "a c"},
        ),
        {"C0": "t1p2 t1p3 t2p2 t2p3 t3p1", "C1": "t1p0 t1p1 t2p0 t2p1 t3p0"},
        id="rack-co-partitioned-pass-runs-once-any-topic-needs-racks",
    ),
    pytest.param(
        group(
            {"t1": 3, "t2": 5},
            member("C0", "t1", "t2", rack="a"),
            member("C1", "t1", "t2", rack="b"),
            member("C2", "t1", "t2", rack="c"),
            racks={"t1": "c b a", "t2": "c b a c b"},
        ),
        {"C0": "t1p2 t2p2", "C1": "t1p1 t2p1 t2p4", "C2": "t1p0 t2p0 t2p3"},
        id="rack-topics-of-different-sizes-matched-one-by-one",
    ),
    pytest.param(
        group(
            {"t0": 4},
            member("m9", "t0", instance="I1", rack="a"),
            member("m1", "t0", instance="I2", rack="b"),
            racks={"t0": "b b a a"},
        ),
        {"m9": "t0p2 t0p3", "m1": "t0p0 t0p1"},
        id="rack-static-members-in-instance-id-order",
    ),
    pytest.param(
        group(
            {"t0": 3},
            member("C0", "t0", rack="a"),
            member("C1", "t0", rack="b"),
            member("C2", "t0", rack="a"),
            member("C3", "t0", rack="b"),
            racks={"t0": "b a -"},
        ),
        {"C0": "t0p1", "C1": "t0p0", "C2": "t0p2", "C3": ""},
        id="rack-more-members-than-partitions",
    ),
]


@pytest.mark.parametrize(("group_input", "expected"), PLAIN_CASES + RACK_CASES)
def test_range_gives_kafkas_answer(group_input: GroupInput, expected: dict[str, str]) -> None:
    assignment = assign(group_input)
    check_assignment(group_input, assignment)
    assert answer(assignment) == spelled(expected)


def test_static_members_keep_their_partitions_when_member_ids_change() -> None:
    def static_group(ids: tuple[str, str, str]) -> GroupInput:
        return group(
            {"topic1": 5, "topic2": 5},
            *(member(m, "topic1", "topic2", instance=f"instance{i + 1}") for i, m in enumerate(ids)),
        )

    before = static_group(("consumer1", "consumer2", "consumer3"))
    after = static_group(("consumer1", "consumer5", "consumer4"))
    by_instance_before = {m.group_instance_id: assign(before)[m.member_id] for m in before.members}
    by_instance_after = {m.group_instance_id: assign(after)[m.member_id] for m in after.members}
    check_assignment(before, assign(before))
    check_assignment(after, assign(after))
    assert by_instance_before == by_instance_after
    assert answer({MemberId(str(k)): v for k, v in by_instance_before.items()}) == {
        "instance1": "topic1p0 topic1p1 topic2p0 topic2p1",
        "instance2": "topic1p2 topic1p3 topic2p2 topic2p3",
        "instance3": "topic1p4 topic2p4",
    }


def test_owned_partitions_do_not_matter() -> None:
    plain = group({"t0": 4}, member("C0", "t0"), member("C1", "t0"))
    owning = GroupInput(
        topics=plain.topics,
        members=(
            Member(
                member_id=MemberId("C0"),
                topics=frozenset({"t0"}),
                owned=(TopicPartition("t0", 3),),
                generation=4,
            ),
            Member(
                member_id=MemberId("C1"),
                topics=frozenset({"t0"}),
                owned=(TopicPartition("t0", 0),),
                generation=4,
            ),
        ),
    )
    assert assign(owning) == assign(plain)


def test_a_million_partitions_split_in_ranges() -> None:
    big = group({"big": 1_000_000}, *(member(f"C{i:03d}", "big") for i in range(1000)))
    assignment = assign(big)
    assert [len(assignment[MemberId(f"C{i:03d}")]) for i in (0, 999)] == [1000, 1000]
    assert assignment[MemberId("C001")][0] == TopicPartition("big", 1000)
