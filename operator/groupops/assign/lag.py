"""`lag`: the seed LagBasedPartitionAssignor (shared/seeds/000), to the partition, per capacity.

Guarantees, in priority order, for each topic separately (counts and totals restart per topic);
`c` is the member's capacity (`Member.capacity`, 1.0 unless the policy says otherwise):
1. partitions are taken in decreasing lag (equal lag: lower partition first);
2. each goes to the subscriber with the fewest partitions per capacity once it has it,
   (count + 1) / c,
3. then the least lag per capacity once it has it, (lag so far + this lag) / c,
4. then the smallest member id (Java string order).
When every subscriber of a topic has the same capacity (always, unless the policy sets
`consumers.capacity`), dividing by it changes no comparison: rules 2 and 3 are the seed's "fewest
partitions, then least lag", and the answer is the seed's exactly (exact integers, the code
below never divides). With unequal capacities, rule 2 is D'Hondt's apportionment: a member of
capacity 2 takes about twice the partitions, hence about twice the lag, of one of capacity 1.

Example (seed 000): C0 and C1 on t0 with lags 100,000 / 50,000 / 60,000 give
C0 [t0p0] (100,000) and C1 [t0p1, t0p2] (110,000). With C0 of capacity 2 and lags 60, 50, 40,
30, 20, 10: C0 [t0p0, t0p2, t0p3, t0p5] (140, 70 per capacity), C1 [t0p1, t0p4] (70).

The seed scans every consumer for every partition, O(P x C). With equal capacities the picks are
done a round at a time: at the start of round r every subscriber holds r partitions, so the
round's partitions (the next C in lag order) go, largest first, to the subscribers sorted by (lag
so far, member id); O(P log C) with the sorting done by numpy. With unequal capacities the
subscribers are grouped by capacity: within a group the order by (count, lag, member id) does not
depend on the partition, so each group is a heap and a pick compares the K groups' heads,
O(P x K log C) for K distinct capacities. Those comparisons are in floating point.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
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
    capacities_of: dict[int, list[float]] = {}
    owners: list[npt.NDArray[np.int64]] = []
    for topic in topics:
        positions = positions_by_topic[topic]
        members = as_array.setdefault(id(positions), np.asarray(positions, dtype=np.int64))
        lags = np.asarray(group.lags.get(topic, np.zeros(group.topics[topic])), dtype=np.int64)
        if id(positions) not in capacities_of:
            capacities_of[id(positions)] = [by_id[position].capacity for position in positions]
        capacities = capacities_of[id(positions)]
        owners.append(members[assign_topic(lags, len(members), capacities)])
    counts = [group.topics[topic] for topic in topics]
    owner = np.concatenate(owners)
    topic_of = np.repeat(np.arange(len(topics)), counts)
    numbers = np.arange(len(owner)) - np.repeat(np.cumsum([0, *counts[:-1]]), counts)
    _fill(assignment, by_id, owner, np.array(topics, dtype=object)[topic_of], numbers)
    return assignment


def assign_topic(
    lags: npt.NDArray[np.int64], member_count: int, capacities: Sequence[float] | None = None
) -> npt.NDArray[np.int64]:
    """Owner index (into subscribers sorted by member id) of every partition of one topic.
    `capacities`: of those subscribers, in the same order (None: all equal)."""
    partition_order = np.argsort(-lags, kind="stable")
    owners = np.empty(len(lags), dtype=np.int64)
    if member_count == 1:
        owners.fill(0)
        return owners
    if capacities is not None and len(set(capacities)) > 1:
        return _assign_by_capacity(lags, partition_order, capacities)
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


def _assign_by_capacity(
    lags: npt.NDArray[np.int64], partition_order: npt.NDArray[np.int64], capacities: Sequence[float]
) -> npt.NDArray[np.int64]:
    """Rules 2-4 with unequal capacities: one heap per distinct capacity, keyed (count, lag so
    far, member index), which within one capacity is the order of ((count + 1) / c,
    (lag + p) / c, member id) for every p; each pick takes the best of the heads."""
    owners = np.empty(len(lags), dtype=np.int64)
    heaps: dict[float, list[tuple[int, int, int]]] = {}
    for index, capacity in enumerate(capacities):
        heaps.setdefault(capacity, []).append((0, 0, index))
    groups = [(capacity, heap) for capacity, heap in heaps.items()]  # sorted, so already heaps
    python_lags = lags.tolist()
    for partition in partition_order.tolist():
        lag = python_lags[partition]
        _, best_heap = min(groups, key=lambda group: _load_after(group, lag))
        count, total, index = best_heap[0]
        heapq.heapreplace(best_heap, (count + 1, total + lag, index))
        owners[partition] = index
    return owners


def _load_after(group: tuple[float, list[tuple[int, int, int]]], lag: int) -> tuple[float, float, int]:
    """Rules 2-4 for the head of one capacity's heap, were it to take a partition of `lag`."""
    capacity, heap = group
    count, total, index = heap[0]
    return ((count + 1) / capacity, (total + lag) / capacity, index)


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
