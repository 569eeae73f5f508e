"""Figures of one assignment: per-member count and lag, max member lag, its lower bound, moves.

Member lag is the sum of its partitions' lag; `weighted_lag` divides by the member's capacity,
and `max_member_lag` is the largest weighted lag (equal to raw lag when every capacity is 1).
The lower bound holds for every assignment of the group: no member can do better than the total
spread over all capacity, nor than the largest partition on the most capable subscriber.

`moves` counts the previously owned partitions (`invariants.previous_owners`) whose owner changes,
including those that no longer exist: an owned partition of a deleted topic, or beyond its
topic's count, is revoked and goes to nobody; `dropped` says how many of `moves` those are. (A
partition an assignment lists twice, which no strategy gives but a hand-edited plan can hold,
counts for both members' count and lag, and its owner is the member listed last.)
`missing_topics` names the topics members subscribe to that are not in `topics` (not created yet,
or deleted): they contribute nothing, as in Kafka, and this is where a typo in a subscription
shows.

Called by `groupops assign` after every strategy, the planner and the Spark `plan` job, on groups
of up to a million partitions: every partition is turned into one integer index (two C-level
maps over the lists, no Python frame per partition) and the rest is numpy, so the figures cost a
fraction of the assignment itself. Small groups (`_SMALL`) are figured in plain Python instead,
where numpy's cost per call is the whole cost (the operator figures every policy's plans at every
run). Exact integers throughout (lag sums in int64, or Python's).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Sequence
from itertools import chain
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from groupops.assign.invariants import previous_owners
from groupops.model import Assignment, GroupInput, Member, TopicPartition

__all__ = ["AssignmentStats", "MemberStats", "compute_stats", "lower_bound"]

IntArray = npt.NDArray[np.int64]

_TOPIC = operator.itemgetter(0)
_PARTITION = operator.itemgetter(1)


class MemberStats(TypedDict):
    count: int
    lag: int
    weighted_lag: float


class AssignmentStats(TypedDict):
    members: dict[str, MemberStats]
    total_lag: int
    max_member_lag: float
    lower_bound: float
    imbalance: float
    moves: int
    dropped: int
    unassigned: int
    missing_topics: list[str]


def lower_bound(group: GroupInput) -> float:
    """Max-member-lag lower bound: max(total / total capacity, each partition's lag on the most
    capable member subscribed to its topic). Members count once per distinct subscription, so
    2,000 members on the same 500 topics cost 500 steps."""
    capacity_by_topic: dict[str, float] = {}
    total_capacity = 0.0
    by_subscription: dict[frozenset[str], list[float]] = defaultdict(list)
    for member in group.members:
        by_subscription[member.topics].append(member.capacity)
    for topics, capacities in by_subscription.items():
        subscribed = [topic for topic in topics if topic in group.topics]
        if subscribed:
            total_capacity += sum(capacities)
        best = max(capacities)
        for topic in subscribed:
            capacity_by_topic[topic] = max(capacity_by_topic.get(topic, 0.0), best)
    total = 0
    biggest = 0.0
    for topic, capacity in capacity_by_topic.items():
        lags = group.lags.get(topic)
        if lags is None or len(lags) == 0:
            continue
        values = np.asarray(lags, dtype=np.int64)
        total += int(values.sum())
        biggest = max(biggest, int(values.max()) / capacity)
    if total_capacity == 0:
        return 0.0
    return max(total / total_capacity, biggest)


class _Partitions:
    """Every partition of `topics` as one index: partition p of the t-th topic (sorted) is
    offsets[t] + p; -1 for a partition that does not exist."""

    def __init__(self, group: GroupInput) -> None:
        names = sorted(group.topics)
        self.topic_index: defaultdict[str, int] = defaultdict(_absent, {t: i for i, t in enumerate(names)})
        sizes = np.array([group.topics[t] for t in names], dtype=np.int64)
        self.offsets = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.offsets[1:])
        # A size of 0 at index -1, so that a topic not in `topics` (-1) has no partition.
        self.sizes = np.append(sizes, 0)
        self.total = int(self.offsets[-1])

    def indices(self, lists: Sequence[Sequence[TopicPartition]], count: int) -> IntArray:
        """The index of each partition of `lists`, one list after the other (-1: does not exist)."""
        every = chain.from_iterable(lists)
        topic = np.fromiter(map(self.topic_index.__getitem__, map(_TOPIC, every)), np.int64, count)
        every = chain.from_iterable(lists)
        number = np.fromiter(map(_PARTITION, every), np.int64, count)
        index: IntArray = self.offsets[topic] + number
        exists = number < self.sizes[topic]
        if not bool(exists.all()) or (len(number) and int(number.min()) < 0):
            index[~exists | (number < 0)] = -1
        return index

    def lag(self, group: GroupInput) -> IntArray:
        lag = np.zeros(self.total, dtype=np.int64)
        for topic, values in group.lags.items():
            t = self.topic_index.get(topic)
            if t is not None:
                lag[self.offsets[t] : self.offsets[t + 1]] = np.asarray(values, dtype=np.int64)
        return lag


def _absent() -> int:
    return -1


_SMALL = 512
"""Up to this many partitions (in `topics`, assigned and owned, each counted), the figures are
computed in plain Python (`_small_stats`): numpy's fixed cost, some thirty array operations a
call, is more than a small group's whole work, and the operator computes them about three times
per run of every policy (docs/design.md §8.5)."""


def compute_stats(group: GroupInput, assignment: Assignment) -> AssignmentStats:
    if counted_partitions(group, assignment) <= _SMALL:
        return _small_stats(group, assignment)
    return _numpy_stats(group, assignment)


def counted_partitions(group: GroupInput, assignment: Assignment) -> int:
    """What `_SMALL` is compared with: the partitions of `topics`, assigned and owned, each counted."""
    owned = sum(len(member.owned) for member in group.members)
    return sum(group.topics.values()) + sum(map(len, assignment.values())) + owned


def _small_stats(group: GroupInput, assignment: Assignment) -> AssignmentStats:
    """`compute_stats` one partition at a time: the definition as the module docstring states it."""
    # Per topic its count and lags as Python ints (None: no lag given, every partition 0).
    known: dict[str, tuple[int, list[int] | None]] = {}
    for topic, count in group.topics.items():
        values = group.lags.get(topic)
        known[topic] = (count, None if values is None else [int(v) for v in values])
    capacity = {member.member_id: member.capacity for member in group.members}
    members: dict[str, MemberStats] = {}
    holder: dict[TopicPartition, str] = {}
    total_lag = total_assigned = 0
    for member_id, tps in assignment.items():
        lag = 0
        for tp in tps:
            topic, number = tp
            entry = known.get(topic)
            if entry is not None and entry[1] is not None and 0 <= number < entry[0]:
                lag += entry[1][number]
            holder[tp] = member_id  # a partition listed twice: its last holder, as numpy's write
        members[member_id] = {"count": len(tps), "lag": lag, "weighted_lag": lag / capacity[member_id]}
        total_lag += lag
        total_assigned += len(tps)
    owners = previous_owners(group)
    moves = sum(1 for tp, owner in owners.items() if holder.get(tp) != owner)
    dropped = sum(1 for tp in owners if not group.exists(tp))
    return _figures(
        group, members, total_lag=total_lag, total_assigned=total_assigned, moved=(moves, dropped)
    )


def _figures(
    group: GroupInput,
    members: dict[str, MemberStats],
    *,
    total_lag: int,
    total_assigned: int,
    moved: tuple[int, int],
) -> AssignmentStats:
    """The group-wide figures from the per-member ones, both ways of `compute_stats` alike;
    `moved`: (moves, dropped)."""
    subscribed = sum(group.topics[topic] for topic in group.subscribed_topics())
    max_lag = max((m["weighted_lag"] for m in members.values()), default=0.0)
    bound = lower_bound(group)
    return {
        "members": members,
        "total_lag": total_lag,
        "max_member_lag": max_lag,
        "lower_bound": bound,
        "imbalance": max_lag / bound if bound > 0 else 1.0,
        "moves": moved[0],
        "dropped": moved[1],
        "unassigned": subscribed - total_assigned,
        "missing_topics": group.missing_topics(),
    }


def _numpy_stats(group: GroupInput, assignment: Assignment) -> AssignmentStats:
    partitions = _Partitions(group)
    member_ids = list(assignment)
    counts = np.fromiter(map(len, assignment.values()), np.int64, len(member_ids))
    total_assigned = int(counts.sum())
    assigned = partitions.indices(list(assignment.values()), total_assigned)
    holder = np.repeat(np.arange(len(member_ids), dtype=np.int64), counts)

    member_lag = np.zeros(len(member_ids), dtype=np.int64)
    if group.lags and total_assigned:
        # A 0 at index -1: a partition that does not exist has no lag.
        each = np.append(partitions.lag(group), 0)[assigned]
        # Each member's partitions are consecutive: sum per member in one pass (exact int64).
        nonempty = np.flatnonzero(counts)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[nonempty]
        member_lag[nonempty] = np.add.reduceat(each, starts)
    capacity = {member.member_id: member.capacity for member in group.members}
    lags = member_lag.tolist()
    members: dict[str, MemberStats] = {
        member_id: {"count": count, "lag": lag, "weighted_lag": lag / capacity[member_id]}
        for member_id, count, lag in zip(member_ids, counts.tolist(), lags, strict=True)
    }

    moved = _moves(
        group, partitions, member_ids=member_ids, assigned=assigned, holder=holder, assignment=assignment
    )
    return _figures(group, members, total_lag=sum(lags), total_assigned=total_assigned, moved=moved)


def _moves(
    group: GroupInput,
    partitions: _Partitions,
    *,
    member_ids: Sequence[str],
    assigned: IntArray,
    holder: IntArray,
    assignment: Assignment,
) -> tuple[int, int]:
    """(moves, dropped): previously owned partitions whose owner changes, and how many of them
    no longer exist. The previous owner of a partition is its claimant of the highest generation
    (unknown counts lowest), the first in Kafka's member order on ties (previous_owners)."""
    claimants = [member for member in group.members if member.owned]
    if not claimants:
        return 0, 0
    # Best claimant first: highest generation, then Kafka's member order (a stable sort).
    claimants.sort(key=Member.kafka_sort_key)
    claimants.sort(key=lambda member: -1 if member.generation is None else member.generation, reverse=True)
    position = {member_id: i for i, member_id in enumerate(member_ids)}
    lengths = np.fromiter((len(m.owned) for m in claimants), np.int64, len(claimants))
    # A member absent from the assignment keeps nothing: a position no holder has.
    owner = np.array(
        [position.get(m.member_id, len(member_ids) + i) for i, m in enumerate(claimants)], dtype=np.int64
    )
    claimed = partitions.indices([m.owned for m in claimants], int(lengths.sum()))
    claimer = np.repeat(owner, lengths)

    exists = claimed >= 0
    gone: dict[TopicPartition, int] = {}
    if not bool(exists.all()):
        owned = list(chain.from_iterable(m.owned for m in claimants))
        for i in np.flatnonzero(~exists).tolist():
            gone.setdefault(owned[i], int(claimer[i]))  # the first claim is the best claimant's
        claimed, claimer = claimed[exists], claimer[exists]
    if len(claimed) and int(np.bincount(claimed).max()) > 1:
        # A partition claimed twice: the first claim (the best claimant's) wins.
        claimed, first = np.unique(claimed, return_index=True)
        claimer = claimer[first]
    current = np.full(partitions.total, -1, dtype=np.int64)
    valid = assigned >= 0
    current[assigned[valid]] = holder[valid]
    moves = int(np.count_nonzero(current[claimed] != claimer)) + len(gone)
    if gone and not bool(valid.all()):
        # A strategy never assigns a partition that does not exist; an assignment from elsewhere
        # (Kafka's answer, a published plan) may, and one its previous owner keeps is no move.
        # Listed twice, it is judged by its last holder, as an existing one is (`current`).
        last_holder = {
            tp: position[member_id] for member_id, tps in assignment.items() for tp in tps if tp in gone
        }
        moves -= sum(1 for tp, holder_now in last_holder.items() if gone[tp] == holder_now)
    return moves, len(gone)
