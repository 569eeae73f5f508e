"""`lag`: the seed LagBasedPartitionAssignor (shared/seeds/000), to the partition.

Guarantees, in priority order, for each topic separately (counts and totals restart per topic):
1. partitions are taken in decreasing lag (equal lag: lower partition first);
2. each goes to the subscriber with the fewest partitions of this topic so far,
3. then the least lag of this topic so far,
4. then the smallest member id (Java string order).

Example (seed 000): C0 and C1 on t0 with lags 100,000 / 50,000 / 60,000 give
C0 [t0p0] (100,000) and C1 [t0p1, t0p2] (110,000).

The seed scans every consumer for every partition, O(P x C). Here the picks are done a round at a
time: at the start of round r every subscriber holds r partitions, so the round's partitions (the
next C in lag order) go, largest first, to the subscribers sorted by (lag so far, member id). The
answer is the seed's exactly, in O(P log C) with the sorting done by numpy.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
import numpy.typing as npt

from groupops.assign.common import collector_paused, empty_assignment, subscriber_positions
from groupops.model import Assignment, GroupInput, Member, TopicPartition, kafka_string_key

NAME = "lag"

# Below this many subscribers a round is cheaper to order in Python than through numpy.
_NUMPY_ROUND_MIN_MEMBERS = 48


def assign(group: GroupInput) -> Assignment:
    assignment = empty_assignment(group)
    by_id = sorted(group.members, key=lambda m: kafka_string_key(m.member_id))
    positions_by_topic = subscriber_positions(group, by_id)
    topics = sorted(topic for topic in positions_by_topic if group.topics[topic] > 0)
    if not topics:
        return assignment
    as_array: dict[int, npt.NDArray[np.int64]] = {}  # topics with the same subscribers share a list
    owners: list[npt.NDArray[np.int64]] = []
    for topic in topics:
        positions = positions_by_topic[topic]
        members = as_array.setdefault(id(positions), np.asarray(positions, dtype=np.int64))
        lags = np.asarray(group.lags.get(topic, np.zeros(group.topics[topic])), dtype=np.int64)
        owners.append(members[assign_topic(lags, len(members))])
    counts = [group.topics[topic] for topic in topics]
    owner = np.concatenate(owners)
    topic_of = np.repeat(np.arange(len(topics)), counts)
    numbers = np.arange(len(owner)) - np.repeat(np.cumsum([0, *counts[:-1]]), counts)
    _fill(assignment, by_id, owner, np.array(topics, dtype=object)[topic_of], numbers)
    return assignment


def assign_topic(lags: npt.NDArray[np.int64], member_count: int) -> npt.NDArray[np.int64]:
    """Owner index (into subscribers sorted by member id) of every partition of one topic."""
    partition_order = np.argsort(-lags, kind="stable")
    owners = np.empty(len(lags), dtype=np.int64)
    if member_count == 1:
        owners.fill(0)
        return owners
    totals = np.zeros(member_count, dtype=np.int64)
    id_rank = np.arange(member_count)
    use_numpy = member_count >= _NUMPY_ROUND_MIN_MEMBERS
    python_totals = [0] * member_count
    python_lags = lags.tolist()
    python_order = partition_order.tolist()
    for start in range(0, len(lags), member_count):
        if use_numpy:
            chunk = partition_order[start : start + member_count]
            takers = np.lexsort((id_rank, totals))[: len(chunk)]
            owners[chunk] = takers
            totals[takers] += lags[chunk]
        else:
            chunk_list = python_order[start : start + member_count]
            ranked = sorted(range(member_count), key=python_totals.__getitem__)
            for partition, taker in zip(chunk_list, ranked, strict=False):
                owners[partition] = taker
                python_totals[taker] += python_lags[partition]
    return owners


def _fill(
    assignment: Assignment,
    members: list[Member],
    owner: npt.NDArray[np.int64],
    topic_names: npt.NDArray[np.object_],
    numbers: npt.NDArray[np.int64],
) -> None:
    """Group every partition by owner in one pass; topics were laid out in sorted order, so each
    member's partitions come out sorted by (topic, partition)."""
    by_owner = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[by_owner], np.arange(len(members) + 1)).tolist()
    with collector_paused(len(owner)):
        for index, member in enumerate(members):
            ids = by_owner[bounds[index] : bounds[index + 1]]
            if len(ids):
                pairs = zip(topic_names[ids].tolist(), numbers[ids].tolist(), strict=True)
                assignment[member.member_id] = list(map(tuple.__new__, repeat(TopicPartition), pairs))
