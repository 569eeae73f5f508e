"""`range`: Apache Kafka's RangeAssignor (kafka-clients 4.x, KIP-881 rack-aware), to the partition.

Guarantees, in priority order:
1. Per topic, balance: with n partitions and k subscribers every subscriber gets n // k, and exactly
   n % k of them get one more. Without racks the first n % k in Kafka's member order (static
   members by group.instance.id, then dynamic by member id, Java string order) get the extra one
   and each subscriber gets one consecutive range.
2. Co-partitioning: topics with the same subscribers and the same partition count are split
   identically (partition p of each goes to the same member), even when racks are given.
3. Rack locality, best effort, only when it applies (below): a member is given partitions with a
   replica on its own rack as far as 1 and 2 allow.

When racks apply (Kafka's `useRackAwareAssignment`, per topic): some subscriber of the topic has a
non-empty rack, some partition of the topic has a replica on one of those racks, and not every
partition of the topic has replicas on the same set of racks. If no topic qualifies, the result is
plain range. If one does, Kafka runs a rack-matching pass first, then fills the rest with ranges:
- topics grouped by (same subscribers, same partition count) with two or more members go through
  the co-partitioned pass whether or not each topic qualifies by itself: for p = 0, 1, ... the
  first member in order that may take one more partition of every topic of the group and whose
  rack (or no rack: it matches everything) holds a replica of partition p of every topic takes
  partition p of all of them;
- a topic alone in its group is matched only if it qualifies: each member in order takes the
  lowest unassigned partitions on its rack (a member without a rack: the lowest unassigned ones),
  up to its quota (n // k, plus one while members with an extra one are still due);
- then, for every topic, each member in order takes the lowest unassigned partitions up to its
  quota (this is the whole algorithm when racks do not apply).

Example (seed 003): 10 partitions over C1-0, C2-0, C2-1 give 0-3 / 4-6 / 7-9; 11 partitions give
0-3 / 4-7 / 8-10; two topics of 10 repeat the split per topic (C1-0 gets two extra in all).
With racks: t0 of 4 partitions on racks a, b, a, b (one replica each), C0 on rack b and C1 on rack
a give C0 [t0p1, t0p3] and C1 [t0p0, t0p2], where plain range gives C0 [t0p0, t0p1].

Cost: O(P) without racks (one TopicPartition per partition is the main cost); with racks
O(P x replicas per partition), through a cursor per rack over that rack's partitions in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from groupops.assign.common import empty_assignment, kafka_ordered, subscriber_positions, topic_partitions
from groupops.model import Assignment, GroupInput, MemberId

__all__ = ["NAME", "assign"]

NAME = "range"

_NO_RACKS: frozenset[str] = frozenset()


class _Topic:
    """One topic's assignment state, as Kafka's RangeAssignor.TopicAssignmentState keeps it.

    `quota` is n // k; `extra_left` counts the members still due one extra partition; members
    are indexed in Kafka's order (`consumers[i]`, `racks[i]`).
    """

    __slots__ = (
        "consumers",
        "counts",
        "extra_left",
        "needs_rack_aware",
        "picked",
        "quota",
        "racks",
        "replica_racks",
        "size",
        "taken",
        "topic",
        "unassigned",
    )

    def __init__(
        self,
        topic: str,
        size: int,
        consumers: list[MemberId],
        racks: list[str | None],
        replica_racks: Sequence[frozenset[str]] | None,
    ) -> None:
        """`replica_racks[p]`: the racks holding a replica of partition p (None: none given)."""
        self.topic = topic
        self.size = size
        self.consumers = consumers
        self.racks = racks
        self.quota, self.extra_left = divmod(size, len(consumers))
        self.counts = [0] * len(consumers)
        self.unassigned = size
        self.taken: bytearray | None = None
        self.picked: list[list[int]] | None = None
        # Kafka only looks at replica racks when some subscriber of the topic has a rack.
        self.replica_racks: Sequence[frozenset[str]] | None = None
        if any(racks):
            self.replica_racks = replica_racks if replica_racks is not None else [_NO_RACKS] * size
        self.needs_rack_aware = self.replica_racks is not None and _needs_rack_aware(
            {rack for rack in racks if rack is not None}, self.replica_racks
        )

    def rack_key(self) -> int:
        """Kafka groups co-partitioned topics by the size of its replica-rack map: the partition
        count when a subscriber has a rack, else 0 (and a group keyed 0 does nothing)."""
        return self.size if self.replica_racks is not None else 0

    def max_assignable(self, index: int) -> int:
        return max(0, self.quota + (1 if self.extra_left > 0 else 0) - self.counts[index])

    def take(self, index: int, partitions: list[int]) -> None:
        if self.taken is None:
            self.taken = bytearray(self.size)
            self.picked = [[] for _ in self.consumers]
        taken = self.taken
        for partition in partitions:
            taken[partition] = 1
        assert self.picked is not None
        self.picked[index].extend(partitions)
        self.counts[index] += len(partitions)
        if self.counts[index] > self.quota:
            self.extra_left -= 1
        self.unassigned -= len(partitions)

    def match_racks(self) -> None:
        """The single-topic rack pass: each member in order takes the lowest unassigned partitions
        with a replica on its rack (any partition if it has no rack), up to its quota."""
        assert self.replica_racks is not None
        candidates: dict[str | None, list[int]] = {None: list(range(self.size))}
        for rack in self.racks:
            if rack is not None:
                candidates.setdefault(rack, [])
        for partition, replica_racks in enumerate(self.replica_racks):
            for rack in replica_racks:
                on_rack = candidates.get(rack)
                if on_rack is not None:
                    on_rack.append(partition)
        # Everything before a rack's cursor is taken: partitions only ever become taken.
        cursors = dict.fromkeys(candidates, 0)
        for index, rack in enumerate(self.racks):
            if self.unassigned == 0:
                break
            limit = self.max_assignable(index)
            if limit == 0:
                continue
            on_rack = candidates[rack]
            position = cursors[rack]
            taken = self.taken
            chosen: list[int] = []
            while position < len(on_rack) and len(chosen) < limit:
                partition = on_rack[position]
                if taken is None or not taken[partition]:
                    chosen.append(partition)
                position += 1
            cursors[rack] = position
            if chosen:
                self.take(index, chosen)

    def fill_and_emit(self, assignment: Assignment) -> None:
        """The final pass (plain range when nothing was matched): each member in order takes the
        lowest unassigned partitions up to its quota; then every member's partitions are added to
        `assignment` in partition order."""
        topic = self.topic
        if self.taken is None:
            # Nothing of this topic was matched on racks: plain consecutive ranges.
            quota, extra = self.quota, self.extra_left
            all_partitions = list(topic_partitions(topic, range(self.size)))
            start = 0
            for index, member_id in enumerate(self.consumers):
                length = quota + 1 if index < extra else quota
                if length == 0:
                    break
                assignment[member_id] += all_partitions[start : start + length]
                start += length
            return
        taken = self.taken
        cursor = 0
        for index in range(len(self.consumers)):
            if self.unassigned == 0:
                break
            limit = self.max_assignable(index)
            chosen: list[int] = []
            while len(chosen) < limit and cursor < self.size:
                if not taken[cursor]:
                    chosen.append(cursor)
                cursor += 1
            if chosen:
                self.take(index, chosen)
        assert self.picked is not None
        for member_id, partitions in zip(self.consumers, self.picked, strict=True):
            partitions.sort()
            assignment[member_id].extend(topic_partitions(topic, partitions))


def _needs_rack_aware(member_racks: set[str], replica_racks: Sequence[frozenset[str]]) -> bool:
    """Kafka's AbstractPartitionAssignor.useRackAwareAssignment for one topic."""
    all_replica_racks: set[str] = set()
    for racks in replica_racks:
        all_replica_racks.update(racks)
    if not member_racks or member_racks.isdisjoint(all_replica_racks):
        return False
    return any(racks != all_replica_racks for racks in replica_racks)


def _match_copartitioned(topics: list[_Topic]) -> None:
    """The co-partitioned rack pass over topics with the same subscribers and partition count.

    Their counters move in lockstep, so eligibility (may take one more partition of every topic)
    is read from the first. Eligibility only ever goes from true to false, so a cursor per rack
    over that rack's members in order finds the first eligible member of each rack in amortised
    constant time; a member without a rack matches every partition.
    """
    first = topics[0]
    by_rack: dict[str | None, list[int]] = {}
    for index, rack in enumerate(first.racks):
        by_rack.setdefault(rack, []).append(index)
    cursors = dict.fromkeys(by_rack, 0)

    def first_eligible(rack: str | None) -> int:
        members = by_rack.get(rack)
        if members is None:
            return -1
        position = cursors[rack]
        while position < len(members) and first.max_assignable(members[position]) == 0:
            position += 1
        cursors[rack] = position
        return members[position] if position < len(members) else -1

    replica_racks = [topic.replica_racks for topic in topics]
    for partition in range(first.size):
        common: frozenset[str] = _NO_RACKS
        for index, per_partition in enumerate(replica_racks):
            assert per_partition is not None
            common = per_partition[partition] if index == 0 else common & per_partition[partition]
        best = first_eligible(None)
        for rack in common:
            candidate = first_eligible(rack)
            if candidate >= 0 and (best < 0 or candidate < best):
                best = candidate
        if best >= 0:
            for topic in topics:
                topic.take(best, [partition])


def _match_racks(topics: list[_Topic]) -> None:
    """Kafka's assignWithRackMatching: per group of (subscribers, rack-map size)."""
    groups: dict[tuple[tuple[MemberId, ...], int], list[_Topic]] = {}
    for topic in topics:
        groups.setdefault((tuple(topic.consumers), topic.rack_key()), []).append(topic)
    for (_, size), grouped in groups.items():
        if len(grouped) > 1:
            if size > 0:
                _match_copartitioned(grouped)
        elif grouped[0].needs_rack_aware:
            grouped[0].match_racks()


def assign(group: GroupInput) -> Assignment:
    """Kafka's RangeAssignor output for `group`; every member present, lists sorted."""
    ordered = kafka_ordered(group.members)
    # Kafka ignores an empty rack id (RangeAssignor.consumerRacks).
    racks = [member.rack or None for member in ordered]
    # Topics with the same subscribers share one positions list, and so their member lists.
    shared: dict[int, tuple[list[MemberId], list[str | None]]] = {}
    topics: list[_Topic] = []
    for name, positions in sorted(subscriber_positions(group, ordered).items()):
        if group.topics[name] == 0:
            continue
        members = shared.get(id(positions))
        if members is None:
            members = ([ordered[i].member_id for i in positions], [racks[i] for i in positions])
            shared[id(positions)] = members
        topics.append(_Topic(name, group.topics[name], *members, group.partition_racks.get(name)))
    if any(topic.needs_rack_aware for topic in topics):
        _match_racks(topics)
    assignment = empty_assignment(group)
    # Topics in sorted order and partitions ascending within each: every list comes out sorted.
    for topic in topics:
        topic.fill_and_emit(assignment)
    return assignment
