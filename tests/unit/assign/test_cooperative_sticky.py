"""`cooperative-sticky`: Kafka's CooperativeStickyAssignor: the sticky target, minus every
partition changing owner, which is revoked first and handed over in the next round.

Every expected assignment below was checked against kafka-clients 4.3.1's CooperativeStickyAssignor.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import Assignment, GroupInput, Member
from tests.unit.assign.sticky_groups import group, groups, member, names

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
@given(g=groups(equal=True))
def test_rounds_converge_to_the_sticky_target(g: GroupInput) -> None:
    """Two rounds later (owning what the previous round gave), nothing is withheld any more."""
    current = g
    for generation in (10, 11, 12):
        current = next_round(current, cooperative(current), generation)
    assert cooperative(current) == get_strategy("sticky")(current)
