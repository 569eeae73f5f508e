"""`cooperative-sticky`: Kafka's CooperativeStickyAssignor: the sticky target, minus every
partition changing owner, which is revoked first and handed out again in a follow-up rebalance.

Every expected assignment below was checked against kafka-clients 4.3.1's CooperativeStickyAssignor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import Assignment, GroupInput, Member, TopicPartition
from tests.unit.assign.sticky_groups import group, groups, member, names

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Kafka promises no number of follow-up rebalances. Its own CooperativeStickyAssignorTest
# (verifyValidityAndBalance) fails a scenario that needs more than four, and four is the most
# Kafka needed on any group of `groups(equal=True)` we handed it (tools/kafka-assignors).
KAFKA_MAX_FOLLOW_UPS = 4


def cooperative(g: GroupInput) -> Assignment:
    assignment = get_strategy("cooperative-sticky")(g)
    check_assignment(g, assignment, may_leave_moving_unassigned=True)
    return assignment


def next_round(g: GroupInput, assignment: Assignment, generation: int) -> GroupInput:
    members = [
        Member(
            member_id=m.member_id,
            topics=m.topics,
            owned=tuple(assignment[m.member_id]),
            generation=generation,
            rack=m.rack,
        )
        for m in g.members
    ]
    return GroupInput(topics=g.topics, members=tuple(members), partition_racks=g.partition_racks)


def spelled(partitions: Sequence[TopicPartition]) -> str:
    return " ".join(f"{tp.topic}p{tp.partition}" for tp in partitions)


@dataclass(frozen=True)
class Rebalances:
    """What `rebalance_until_nothing_is_revoked` saw: per rebalance that revoked something, the
    partitions revoked (spelled "t0p1 t2p0"); then the last input and its answer."""

    revoked: list[str]
    last_input: GroupInput
    last_answer: Assignment


def rebalance_until_nothing_is_revoked(g: GroupInput, *, follow_ups: int) -> Rebalances:
    """Rebalance as Kafka's cooperative consumers do: while an answer makes a member revoke a
    partition it owns, every member joins again owning what it was given, one generation later.
    Fails when the answer still revokes something after `follow_ups` follow-up rebalances."""
    current = g
    revoked: list[str] = []
    for generation in range(10, 11 + follow_ups):
        answer = cooperative(current)
        given_up = sorted(tp for m in current.members for tp in set(m.owned) - set(answer[m.member_id]))
        if not given_up:
            return Rebalances(revoked, current, answer)
        revoked.append(spelled(given_up))
        current = next_round(current, answer, generation)
    raise AssertionError(f"still revoking after {follow_ups} follow-up rebalances; revoked: {revoked}")


def replica_racks(**layouts: str) -> dict[str, list[frozenset[str]]]:
    """Per topic, "r1 - r1,r2": partition 0 on rack r1, partition 1 on none, 2 on r1 and r2."""
    return {
        topic: [frozenset() if spec == "-" else frozenset(spec.split(",")) for spec in layout.split()]
        for topic, layout in layouts.items()
    }


class TestRevokeFirst:
    def test_a_joining_member_gets_the_surplus_one_round_later(self) -> None:
        g = group({"t0": 4}, [member("C0", ["t0"], [("t0", p) for p in range(4)], 1), member("C1", ["t0"])])
        first = cooperative(g)
        assert names(first) == {"C0": ["t0p0", "t0p1"], "C1": []}
        assert names(cooperative(next_round(g, first, 2))) == {"C0": ["t0p0", "t0p1"], "C1": ["t0p2", "t0p3"]}

    def test_partitions_of_a_member_that_left_are_handed_out_at_once(self) -> None:
        topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
        owned = {"C0": [("t0", 0), ("t1", 1), ("t3", 0)], "C2": [("t1", 0), ("t2", 1)]}
        g = group(topics, [member(m, topics, owned[m], 1) for m in ("C0", "C2")])
        assert names(cooperative(g)) == {
            "C0": ["t0p0", "t0p1", "t1p1", "t3p0"],
            "C2": ["t1p0", "t2p0", "t2p1", "t3p1"],
        }

    def test_a_partition_claimed_twice_in_one_generation_waits_a_round(self) -> None:
        g = group(
            {"t0": 4},
            [
                member("A", ["t0"], [("t0", 0), ("t0", 1)], 3),
                member("B", ["t0"], [("t0", 1), ("t0", 2)], 3),
                member("C", ["t0"]),
            ],
        )
        assert names(cooperative(g)) == {"A": ["t0p0", "t0p3"], "B": ["t0p2"], "C": []}

    def test_the_higher_generation_keeps_a_doubly_claimed_partition(self) -> None:
        g = group(
            {"t0": 4},
            [member("A", ["t0"], [("t0", 0), ("t0", 1)], 3), member("B", ["t0"], [("t0", 1), ("t0", 2)], 4)],
        )
        assert names(cooperative(g)) == {"A": ["t0p0", "t0p3"], "B": ["t0p1", "t0p2"]}

    def test_unequal_subscriptions_withhold_what_another_member_owned(self) -> None:
        topics = {"t0": 3, "t1": 3}
        everything = [("t0", p) for p in range(3)] + [("t1", p) for p in range(3)]
        g = group(topics, [member("A", ["t0", "t1"], everything, 5), member("B", ["t1"])])
        first = cooperative(g)
        assert names(first) == {"A": ["t0p0", "t0p1", "t0p2"], "B": []}
        assert names(cooperative(next_round(g, first, 6))) == {
            "A": ["t0p0", "t0p1", "t0p2"],
            "B": ["t1p0", "t1p1", "t1p2"],
        }

    def test_rack_moves_are_revoked_first_too(self) -> None:
        g = group(
            {"t0": 6},
            [
                member("a", ["t0"], [("t0", 0), ("t0", 1), ("t0", 2)], 2, rack="r1"),
                member("b", ["t0"], [("t0", 3), ("t0", 4), ("t0", 5)], 2, rack="r2"),
            ],
            {"t0": [frozenset([r]) for r in ("r1", "r2", "r1", "r2", "r1", "r2")]},
        )
        assert names(cooperative(g)) == {"a": ["t0p0", "t0p2"], "b": ["t0p3", "t0p5"]}


@SETTINGS
@given(g=groups())
def test_every_partition_assigned_once_or_withheld_while_changing_owner(g: GroupInput) -> None:
    cooperative(g)


@SETTINGS
@given(g=groups())
def test_same_group_same_answer(g: GroupInput) -> None:
    assert cooperative(g) == cooperative(g)
    reversed_members = GroupInput(topics=g.topics, members=g.members[::-1], partition_racks=g.partition_racks)
    assert cooperative(reversed_members) == cooperative(g)


@SETTINGS
@given(g=groups())
def test_the_answer_is_the_sticky_target_minus_partitions_another_member_owned(g: GroupInput) -> None:
    target = get_strategy("sticky")(g)
    answer = cooperative(g)
    claimants: dict[object, set[str]] = {}
    for m in g.members:
        for tp in m.owned:
            claimants.setdefault(tp, set()).add(m.member_id)
    for m in g.members:
        assert set(answer[m.member_id]) <= set(target[m.member_id])
        for tp in set(target[m.member_id]) - set(answer[m.member_id]):
            assert claimants.get(tp, set()) - {m.member_id}, (m.member_id, tp)


@SETTINGS
@given(g=groups(owned=False))
def test_without_owned_partitions_nothing_is_withheld(g: GroupInput) -> None:
    assert cooperative(g) == get_strategy("sticky")(g)


@SETTINGS
@given(g=groups(equal=True, racks=False))
def test_without_racks_one_follow_up_reaches_the_sticky_target(g: GroupInput) -> None:
    """After the first answer every member owns at most what the sticky target gives it, and at
    most P % N members own maxQuota, so the builder's first step keeps everything owned, revokes
    nothing, and hands the withheld partitions out to fill the quotas."""
    rebalances = rebalance_until_nothing_is_revoked(g, follow_ups=1)
    assert rebalances.last_answer == get_strategy("sticky")(rebalances.last_input)


@SETTINGS
@given(g=groups(equal=True))
def test_rounds_converge_to_the_sticky_target(g: GroupInput) -> None:
    """Follow-up rebalances (each member owning what the previous one gave it) reach, within
    Kafka's four, an answer that revokes nothing, and that answer is the sticky target.

    Not "within a fixed two or three": with KIP-881 racks the sticky target itself moves between
    rebalances, in Kafka too. A member keeps in the builder's first step only the owned
    partitions with a replica in its rack; its others are dealt round robin again together with
    the partitions withheld last round, which are owned by nobody now, and that deal depends on
    which partitions are free. So a follow-up can give a withheld partition to yet another member
    and withhold again. Kafka's own answers on such groups, round by round, are in
    `test_follow_up_rebalances_give_kafkas_answers` (the group Hypothesis found first needs four).
    Without rack-aware assignment one follow-up is enough (the test above).
    """
    rebalances = rebalance_until_nothing_is_revoked(g, follow_ups=KAFKA_MAX_FOLLOW_UPS)
    assert rebalances.last_answer == get_strategy("sticky")(rebalances.last_input)


T012 = ("t0", "t1", "t2")


@pytest.mark.parametrize(
    ("g", "revoked", "settled"),
    [
        pytest.param(
            group({"t0": 4}, [member("C0", ["t0"], [("t0", p) for p in range(4)], 1), member("C1", ["t0"])]),
            ["t0p2 t0p3"],
            {"C0": "t0p0 t0p1", "C1": "t0p2 t0p3"},
            id="no-racks-a-joining-member-one-follow-up",
        ),
        pytest.param(
            group(
                {"t1": 5, "t2": 8},
                [
                    member("a", ["t1", "t2"]),
                    member("B", ["t1", "t2"], [("t2", 1), ("t1", 1)], 1, rack="r1"),
                ],
                replica_racks(t1="- - - - -", t2="r1 - - - - - - -"),
            ),
            # B keeps only t2p0 (the one partition in its rack) in the first step each time; the
            # round robin then hands a different one of its partitions to `a` every round.
            ["t1p1 t2p1", "t1p4 t2p7", "t1p2", "t2p4"],
            {"B": "t1p0 t1p2 t1p4 t2p0 t2p1 t2p2", "a": "t1p1 t1p3 t2p3 t2p4 t2p5 t2p6 t2p7"},
            id="racks-a-member-with-one-partition-in-its-rack-four-follow-ups",
        ),
        pytest.param(
            group(
                {"t0": 5, "t1": 8, "t2": 8},
                [
                    member("a", T012, [("t0", 0), ("t1", 4)], 1, rack="r1"),
                    member("b", T012),
                    member("B", T012, [("t1", 5)], 1),
                    member("C0", T012, [("t2", 2)], 1, rack="r2"),
                ],
                replica_racks(t0="- - - - -", t1="- - r1 r1 - - - -", t2="- - - - - - - -"),
            ),
            ["t0p0 t1p4 t2p2", "t1p0 t1p1 t1p7 t2p0 t2p7", "t0p1 t0p2", "t1p0 t1p4 t1p7 t2p0 t2p2 t2p5"],
            {
                "B": "t0p0 t0p4 t1p5 t1p6 t2p5 t2p7",
                "C0": "t0p1 t1p0 t1p7 t2p2 t2p3",
                "a": "t0p2 t1p2 t1p3 t1p4 t2p0",
                "b": "t0p3 t1p1 t2p1 t2p4 t2p6",
            },
            id="racks-hypothesis-counterexample-four-follow-ups",
        ),
    ],
)
def test_follow_up_rebalances_give_kafkas_answers(
    g: GroupInput, revoked: list[str], settled: dict[str, str]
) -> None:
    """Round by round as Kafka's CooperativeStickyAssignor answers (through tools/kafka-assignors):
    what each rebalance revokes, and the answer that finally revokes nothing."""
    rebalances = rebalance_until_nothing_is_revoked(g, follow_ups=len(revoked))
    assert rebalances.revoked == revoked
    assert {m: spelled(tps) for m, tps in rebalances.last_answer.items()} == settled
