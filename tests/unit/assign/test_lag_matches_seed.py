"""`lag` gives the seed LagBasedPartitionAssignor's answers (shared/seeds/000), per topic."""

from __future__ import annotations

import random

import numpy as np
import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.model import GroupInput, Member, MemberId, TopicPartition, kafka_string_key


def group_of(topics: dict[str, int], members: dict[str, list[str]], lags: dict[str, list[int]]) -> GroupInput:
    return GroupInput(
        topics=topics,
        members=tuple(Member(member_id=MemberId(m), topics=frozenset(t)) for m, t in members.items()),
        lags=lags,
    )


def as_names(assignment: dict[MemberId, list[TopicPartition]]) -> dict[str, list[str]]:
    return {member: [f"{tp.topic}p{tp.partition}" for tp in tps] for member, tps in assignment.items()}


def seed_reference(group: GroupInput) -> dict[str, list[TopicPartition]]:
    """The seed's algorithm as its README and code describe it: a linear scan per partition."""
    result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in group.members}
    for topic in sorted(group.topics):
        consumers = [m.member_id for m in group.members if topic in m.topics]
        if not consumers:
            continue
        lags = list(group.lags.get(topic, [0] * group.topics[topic]))
        counts = dict.fromkeys(consumers, 0)
        totals = dict.fromkeys(consumers, 0)
        for partition in sorted(range(len(lags)), key=lambda p: (-lags[p], p)):
            chosen = min(consumers, key=lambda c: (counts[c], totals[c], kafka_string_key(c)))
            counts[chosen] += 1
            totals[chosen] += lags[partition]
            result[chosen].append(TopicPartition(topic, partition))
    return {member: sorted(tps) for member, tps in result.items()}


SEED_CASES = [
    pytest.param(
        group_of({"t0": 3}, {"C0": ["t0"], "C1": ["t0"]}, {"t0": [100_000, 50_000, 60_000]}),
        {"C0": ["t0p0"], "C1": ["t0p1", "t0p2"]},
        id="seed-000-readme-example",
    ),
    pytest.param(
        group_of({"t0": 4}, {"C1": ["t0"], "C0": ["t0"]}, {"t0": [5, 5, 5, 5]}),
        {"C0": ["t0p0", "t0p2"], "C1": ["t0p1", "t0p3"]},
        id="equal-lag-lower-partition-first-smaller-id-first",
    ),
    pytest.param(
        group_of({"a": 2, "b": 2}, {"C0": ["a", "b"], "C1": ["a", "b"]}, {"a": [10, 0], "b": [10, 0]}),
        {"C0": ["ap0", "bp0"], "C1": ["ap1", "bp1"]},
        id="counts-and-totals-restart-for-every-topic",
    ),
    pytest.param(
        group_of({"t": 3}, {"consumer2": ["t"], "consumer10": ["t"]}, {"t": [0, 0, 0]}),
        {"consumer10": ["tp0", "tp2"], "consumer2": ["tp1"]},
        id="member-ids-compare-as-java-strings",
    ),
    pytest.param(
        group_of({"t0": 2, "t1": 1}, {"C0": ["t0"], "C1": ["t0", "t1"]}, {"t0": [3, 9], "t1": [7]}),
        {"C0": ["t0p1"], "C1": ["t0p0", "t1p0"]},
        id="only-subscribers-take-a-topic",
    ),
]


@pytest.mark.parametrize(("group", "expected"), SEED_CASES)
def test_lag_matches_the_seed_examples(group: GroupInput, expected: dict[str, list[str]]) -> None:
    assignment = get_strategy("lag")(group)
    check_assignment(group, assignment)
    assert as_names(assignment) == expected


def test_range_on_the_seed_example_is_the_less_balanced_answer() -> None:
    group = group_of({"t0": 3}, {"C0": ["t0"], "C1": ["t0"]}, {"t0": [100_000, 50_000, 60_000]})
    assert as_names(get_strategy("range")(group)) == {"C0": ["t0p0", "t0p1"], "C1": ["t0p2"]}


@pytest.mark.parametrize("members", [2, 3, 7, 47, 48, 49, 130])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lag_equals_the_seeds_linear_scan_on_random_groups(members: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + members)
    topics = {f"t{i}": rng.randint(0, 400) for i in range(3)}
    subscriptions = {f"m{j}": [t for t in topics if rng.random() < 0.8] or ["t0"] for j in range(members)}
    # Few distinct lags force ties on lag and on running totals, which the tie-breaks must settle.
    lags = {t: [rng.choice([0, 1, 2, 5, 100]) for _ in range(n)] for t, n in topics.items()}
    group = group_of(topics, subscriptions, lags)
    assignment = get_strategy("lag")(group)
    check_assignment(group, assignment)
    assert assignment == seed_reference(group)


def test_lag_accepts_numpy_lag_arrays() -> None:
    group = group_of({"t0": 3}, {"C0": ["t0"], "C1": ["t0"]}, {"t0": np.array([100_000, 50_000, 60_000])})  # type: ignore[dict-item]
    assert as_names(get_strategy("lag")(group)) == {"C0": ["t0p0"], "C1": ["t0p1", "t0p2"]}
