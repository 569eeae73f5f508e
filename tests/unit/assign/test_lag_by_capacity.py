"""`lag` weighs each member's capacity: fewest partitions per capacity, then least lag per
capacity (both once the member has the partition); with equal capacities it is the seed's."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.assign.stats import compute_stats
from groupops.model import GroupInput, Member, MemberId, TopicPartition, kafka_string_key
from tests.unit.assign.test_lag_matches_seed import SEED_CASES, as_names, seed_reference

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lag(group: GroupInput) -> dict[MemberId, list[TopicPartition]]:
    assignment = get_strategy("lag")(group)
    check_assignment(group, assignment)
    return assignment


def weighted_reference(group: GroupInput) -> dict[str, list[TopicPartition]]:
    """The rule as the docstring states it, a linear scan per partition."""
    result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in group.members}
    for topic in sorted(group.topics):
        consumers = [m for m in group.members if topic in m.topics]
        if not consumers:
            continue
        lags = list(group.lags.get(topic, [0] * group.topics[topic]))
        counts = {m.member_id: 0 for m in consumers}
        totals = {m.member_id: 0 for m in consumers}
        for partition in sorted(range(len(lags)), key=lambda p: (-lags[p], p)):
            chosen = min(
                consumers,
                key=lambda m: (
                    (counts[m.member_id] + 1) / m.capacity,
                    (totals[m.member_id] + lags[partition]) / m.capacity,
                    kafka_string_key(m.member_id),
                ),
            )
            counts[chosen.member_id] += 1
            totals[chosen.member_id] += lags[partition]
            result[chosen.member_id].append(TopicPartition(topic, partition))
    return {member: sorted(tps) for member, tps in result.items()}


def one_topic(lags: list[int], capacities: dict[str, float]) -> GroupInput:
    return GroupInput(
        topics={"t0": len(lags)},
        members=tuple(
            Member(member_id=MemberId(m), topics=frozenset({"t0"}), capacity=c) for m, c in capacities.items()
        ),
        lags={"t0": lags},
    )


@st.composite
def groups(draw: st.DrawFn, capacities: st.SearchStrategy[float]) -> GroupInput:
    topics = {f"t{i}": draw(st.integers(0, 12)) for i in range(draw(st.integers(1, 3)))}
    ids = draw(
        st.lists(
            st.sampled_from(["C0", "C1", "C2", "c10", "c2", "m", "\uffff", "\U0001f600"]),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    members = tuple(
        Member(
            member_id=MemberId(member_id),
            topics=frozenset(draw(st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))),
            capacity=draw(capacities),
        )
        for member_id in ids
    )
    # Few distinct lags force ties on lag and on running totals.
    lags = {
        t: draw(st.lists(st.sampled_from([0, 1, 2, 5, 100, 10**6]), min_size=n, max_size=n))
        for t, n in topics.items()
    }
    return GroupInput(topics=topics, members=members, lags=lags)


class TestWorkedExamples:
    def test_a_member_of_capacity_two_takes_twice_the_lag(self) -> None:
        group = one_topic([60, 50, 40, 30, 20, 10], {"C0": 2.0, "C1": 1.0})
        assert as_names(lag(group)) == {"C0": ["t0p0", "t0p2", "t0p3", "t0p5"], "C1": ["t0p1", "t0p4"]}
        stats = compute_stats(group, lag(group))
        assert {m: s["lag"] for m, s in stats["members"].items()} == {"C0": 140, "C1": 70}
        assert {m: s["weighted_lag"] for m, s in stats["members"].items()} == {"C0": 70.0, "C1": 70.0}

    def test_equal_lags_split_by_capacity(self) -> None:
        group = one_topic([100] * 6, {"C0": 2.0, "C1": 1.0})
        assert {m: len(tps) for m, tps in lag(group).items()} == {"C0": 4, "C1": 2}

    def test_a_slow_member_takes_fewer(self) -> None:
        group = one_topic([10] * 8, {"A": 1.0, "B": 1.0, "C": 0.5, "D": 0.5})
        assert {m: len(tps) for m, tps in lag(group).items()} == {"A": 3, "B": 3, "C": 1, "D": 1}

    @pytest.mark.parametrize("capacity", [1.0, 0.25, 3.0])
    @pytest.mark.parametrize(("group", "expected"), SEED_CASES)
    def test_the_seed_examples_hold_with_any_equal_capacity(
        self, group: GroupInput, expected: dict[str, list[str]], capacity: float
    ) -> None:
        same = GroupInput(
            topics=group.topics,
            members=tuple(
                Member(member_id=m.member_id, topics=m.topics, capacity=capacity) for m in group.members
            ),
            lags=group.lags,
        )
        assert as_names(lag(same)) == expected


class TestStats:
    def test_max_member_lag_and_lower_bound_are_per_capacity(self) -> None:
        group = one_topic([60, 50, 40, 30, 20, 10], {"C0": 2.0, "C1": 1.0})
        stats = compute_stats(group, lag(group))
        assert stats["max_member_lag"] == 70.0
        assert stats["lower_bound"] == 70.0  # 210 over a capacity of 3; the largest, 60, on C0 is 30
        assert stats["imbalance"] == 1.0

    def test_ignoring_capacity_shows_as_imbalance(self) -> None:
        group = one_topic([60, 50, 40, 30, 20, 10], {"C0": 2.0, "C1": 1.0})
        seed_answer = seed_reference(group)  # the rule before capacity: C0 110, C1 100
        assert compute_stats(group, dict(seed_answer))["imbalance"] == pytest.approx(100 / 70)  # type: ignore[arg-type]


@SETTINGS
@given(group=groups(st.just(1.0)))
def test_with_every_capacity_one_the_answer_is_the_seeds(group: GroupInput) -> None:
    assert lag(group) == seed_reference(group)


@SETTINGS
@given(group=groups(st.sampled_from([0.5, 2.0])), data=st.data())
def test_with_one_capacity_for_all_the_answer_is_the_seeds(group: GroupInput, data: st.DataObject) -> None:
    capacity = data.draw(st.sampled_from([0.5, 2.0, 7.0]))
    same = GroupInput(
        topics=group.topics,
        members=tuple(
            Member(member_id=m.member_id, topics=m.topics, capacity=capacity) for m in group.members
        ),
        lags=group.lags,
    )
    assert lag(same) == seed_reference(same)


@SETTINGS
@given(group=groups(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0, 0.3])))
def test_with_unequal_capacities_the_answer_is_the_stated_rule(group: GroupInput) -> None:
    assert lag(group) == weighted_reference(group)


@pytest.mark.parametrize("members", [3, 49, 130])
def test_many_members_and_partitions_follow_the_stated_rule(members: int) -> None:
    capacities = {f"m{j}": [0.5, 1.0, 2.0][j % 3] for j in range(members)}
    group = one_topic([(p * 7919) % 1000 for p in range(members * 5 + 3)], capacities)
    assert lag(group) == weighted_reference(group)
