"""`stats.compute_stats` gives the figures its definition says, on every kind of group.

The reference below is the definition written the plain way (a dict per partition, Python
integers), as `compute_stats` was before it was made to run in numpy; both must agree on random
groups of every shape the differential tests use (owned partitions claimed twice, of deleted
topics, beyond a topic's count, subscriptions to missing topics) and on assignments from every
strategy, plus assignments no strategy gives (a nonexistent partition kept by its owner, as
Kafka's answer can do).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from groupops.assign import STRATEGY_NAMES, get_strategy, stats
from groupops.assign.invariants import previous_owners
from groupops.assign.stats import compute_stats, lower_bound
from groupops.model import Assignment, GroupInput, MemberId, TopicPartition
from tests.differential.random_groups import random_group


def reference_stats(group: GroupInput, assignment: Assignment) -> dict[str, object]:
    capacities = {member.member_id: member.capacity for member in group.members}
    members = {}
    for member_id, partitions in assignment.items():
        lag = sum(group.lag(tp) if group.exists(tp) else 0 for tp in partitions)
        members[member_id] = {
            "count": len(partitions),
            "lag": lag,
            "weighted_lag": lag / capacities[member_id],
        }
    owners = previous_owners(group)
    owner_now = {tp: member_id for member_id, partitions in assignment.items() for tp in partitions}
    max_lag = max((m["weighted_lag"] for m in members.values()), default=0.0)
    return {
        "members": members,
        "total_lag": sum(m["lag"] for m in members.values()),
        "max_member_lag": max_lag,
        "moves": sum(1 for tp, owner in owners.items() if owner_now.get(tp) != owner),
        "dropped": sum(1 for tp in owners if not group.exists(tp)),
        "unassigned": sum(group.topics[t] for t in group.subscribed_topics())
        - sum(len(p) for p in assignment.values()),
        "missing_topics": group.missing_topics(),
    }


def with_random_lags(group: GroupInput, rng: random.Random) -> GroupInput:
    lags = {
        topic: np.array([rng.choice((0, 1, 7, 10**6, 2**40)) for _ in range(count)], dtype=np.int64)
        for topic, count in group.topics.items()
        if rng.random() < 0.8
    }
    return GroupInput(topics=group.topics, members=group.members, lags=lags, options=group.options)


def odd_assignment(group: GroupInput, rng: random.Random) -> Assignment:
    """Every member keeps what it owns, existing or not, plus random partitions: what Kafka's
    sticky assignors can answer when owned partitions lie beyond a topic's count."""
    result: Assignment = {m.member_id: [] for m in group.members}
    taken: set[TopicPartition] = set()
    for m in group.members:
        for tp in m.owned:
            if tp not in taken:  # each partition to one member at most
                taken.add(tp)
                result[m.member_id].append(tp)
    for topic, count in group.topics.items():
        for partition in range(count):
            tp = TopicPartition(topic, partition)
            if tp not in taken and rng.random() < 0.5 and group.members:
                taken.add(tp)
                result[rng.choice(group.members).member_id].append(tp)
    return {member_id: sorted(tps) for member_id, tps in result.items()}


@pytest.fixture(params=["python", "numpy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways `compute_stats` computes: plain Python up to `_SMALL` partitions, numpy above."""
    monkeypatch.setattr(stats, "_SMALL", 10**9 if request.param == "python" else -1)
    return str(request.param)


@pytest.mark.parametrize("seed", range(6))
def test_compute_stats_agrees_with_the_definition(seed: int, path: str) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        group = with_random_lags(random_group(rng), rng)
        assignments = [get_strategy(name)(group) for name in STRATEGY_NAMES]
        assignments.append(odd_assignment(group, rng))
        for assignment in assignments:
            ours = compute_stats(group, assignment)
            expected = reference_stats(group, assignment)
            assert {key: ours[key] for key in expected} == expected  # type: ignore[literal-required]
            assert ours["lower_bound"] == pytest.approx(lower_bound(group))


def test_lag_sums_are_exact_integers(path: str) -> None:
    big = 2**53 + 1  # not representable as a float64
    group = GroupInput(
        topics={"t": 2},
        members=(),
        lags={"t": np.array([big, 2], dtype=np.int64)},
    )
    group = GroupInput(
        topics=group.topics,
        members=(random_group(random.Random(0)).members[0],),
        lags=group.lags,
    )
    member = group.members[0].member_id
    stats = compute_stats(group, {MemberId(member): [TopicPartition("t", 0), TopicPartition("t", 1)]})
    assert stats["members"][member]["lag"] == big + 2
    assert stats["total_lag"] == big + 2


def test_a_partition_listed_twice_counts_for_both_and_moves_by_its_last_holder(path: str) -> None:
    """Not what a strategy gives, but what a hand-edited plan can hold: both members carry its lag
    and count, and the move is judged by the member listed last, as the definition's dict keeps it."""
    rng = random.Random(3)
    for _ in range(200):
        group = with_random_lags(random_group(rng), rng)
        assignment = odd_assignment(group, rng)
        holders = [m for m, tps in assignment.items() if tps]
        if len(assignment) < 2 or not holders:
            continue
        source = rng.choice(holders)
        other = rng.choice([m for m in assignment if m != source])
        tp = rng.choice(assignment[source])
        doubled = {**assignment, other: sorted([*assignment[other], tp])}
        expected = reference_stats(group, doubled)
        ours = compute_stats(group, doubled)
        assert {key: ours[key] for key in expected} == expected  # type: ignore[literal-required]
