"""The shared front and back of Kafka's sticky assignors: one group turned into integer arrays,
and the integer result turned back into TopicPartition lists.

Stage: called by `sticky.assign` and `cooperative_sticky.assign` (the algorithms themselves are
`sticky_constrained` and `sticky_general`, chosen by `sticky.plan`). Partitions are
integer indices internally (topics in Java `String.compareTo` order, partitions ascending), so
per-partition work is numpy, never a Python dict or object per partition; the only per-partition
Python objects are the TopicPartitions of the result, and owned ones are reused.

What this module reproduces of Kafka's AbstractStickyAssignor (kafka-clients 4.x):
- `partitionsPerTopic` holds the topics some member subscribes to that have partitions, as
  `AbstractPartitionAssignor.assign(Cluster, ...)` builds it: a subscribed topic missing from
  the metadata (or without partitions) is not in it, and owned partitions of topics not in it are
  ignored.
- an owned partition beyond its topic's count (the topic was recreated with fewer partitions)
  is a "stale claim": nothing can keep it, so it is dropped. Kafka keeps such a partition in the
  owner's list; where its answer is still valid (the owner no longer subscribes to the topic, or
  sits in a rack, or is over its quota) that list only made Kafka drop it and, in the general
  builder, note that revocation is required, which `stale_member`/`stale_topic` reproduce. Where
  Kafka would hand the nonexistent partition back to its owner, we do not.
- the members are visited in the iteration order of the leader's `subscriptions` HashMap
  (`groupops.assign.java_compat`), filled in member-id order; "all subscriptions equal" is
  decided on the raw topic sets in that order, and owned partitions claimed twice are settled in
  that order: a later claimant of a higher generation takes the partition, of a lower one leaves
  it, of the same one makes it owned by nobody (`partitionsWithMultiplePreviousOwners`). No or a
  negative generation counts as -1 (Kafka's Subscription drops negative generation ids).
- KIP-881 rack awareness is on when some member has a rack, some partition replica shares a
  rack with a member, and not every partition has the same set of replica racks.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
import numpy.typing as npt

from groupops.assign.common import collector_paused
from groupops.assign.java_compat import java_hashmap_order, java_string_hash
from groupops.model import Assignment, GroupInput, Member, TopicPartition, kafka_string_key

__all__ = ["DEFAULT_GENERATION", "RackInfo", "StickyProblem", "build_problem", "materialize"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_GENERATION = -1
_TOPIC = operator.itemgetter(0)
_PARTITION = operator.itemgetter(1)


def _absent() -> int:
    """Topic index of owned partitions of topics nobody may be assigned (missing, deleted, empty
    or unsubscribed): none."""
    return -1


@dataclass(slots=True)
class RackInfo:
    """Racks as KIP-881 uses them, present only when rack-aware assignment is on.

    Every partition's set of replica racks is one of a few distinct sets: `set_of[g]` indexes
    `rack_sets`; `member_rack[m]` is the member's rack or None; `near[s]` counts the members (of
    all) sitting in a rack of set s (Kafka's `numConsumersByPartition`).
    """

    member_rack: list[str | None]
    rack_sets: list[frozenset[str]]
    set_of: IntArray
    near: IntArray
    set_has_rack: BoolArray
    member_rack_index: IntArray

    def partition_racks(self, g: int) -> frozenset[str]:
        return self.rack_sets[int(self.set_of[g])]

    def mismatch(self, members: IntArray, partitions: IntArray) -> BoolArray:
        """`racksMismatch`, pairwise: the member has a rack and no replica of the partition is in it."""
        racks = self.member_rack_index[members]
        has_rack = racks >= 0
        inside = self.set_has_rack[self.set_of[partitions], np.where(has_rack, racks, 0)]
        mismatched: BoolArray = has_rack & ~inside
        return mismatched

    def consumers_near(self, partitions: IntArray) -> IntArray:
        near: IntArray = self.near[self.set_of[partitions]]
        return near


@dataclass(slots=True)
class StickyProblem:
    """One group as arrays. Members are indexed in input order; partitions by `g`.

    claims_*: every owned partition of a topic in `topics` that exists, member by member in input
    order; `held` marks the claims that survive Kafka's settlement of double claims, and
    `multiple` the partitions two members of one generation claimed (owned by nobody afterwards).
    stale_*: the claims of partitions beyond their topic's count that survive the same
    settlement: the member and the topic index of each.
    """

    members: tuple[Member, ...]
    iteration: list[int]
    id_rank: IntArray
    generation: list[int]
    has_generation: list[bool]
    max_generation: int
    topics: list[str]
    topic_hash: list[int]
    counts: IntArray
    offsets: IntArray
    total: int
    subscribed: list[frozenset[int]]
    all_equal: bool
    claim_member: IntArray
    claim_partition: IntArray
    claim_objects: npt.NDArray[np.object_]
    held: BoolArray
    multiple: BoolArray
    stale_member: IntArray
    stale_topic: IntArray
    racks: RackInfo | None

    def topic_of(self, partitions: IntArray) -> IntArray:
        return np.searchsorted(self.offsets, partitions, side="right").astype(np.int64) - 1

    def all_topic_of(self) -> IntArray:
        return np.repeat(np.arange(len(self.topics), dtype=np.int64), self.counts)


def build_problem(group: GroupInput) -> StickyProblem:
    members = group.members
    distinct = {m.topics: None for m in members}
    wanted: frozenset[str] = frozenset().union(*distinct)
    topics = sorted((t for t in wanted if group.topics.get(t, 0) > 0), key=kafka_string_key)
    topic_index = {topic: i for i, topic in enumerate(topics)}
    counts = np.array([group.topics[t] for t in topics], dtype=np.int64)
    offsets = np.zeros(len(topics) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])

    ids_in_java_order = sorted(range(len(members)), key=lambda i: kafka_string_key(members[i].member_id))
    # The leader's HashMap of subscriptions, filled in member-id order so that the answer does
    # not depend on the order of the input (Kafka's leader fills it in the broker's order).
    filled = java_hashmap_order([java_string_hash(members[i].member_id) for i in ids_in_java_order])
    iteration = [ids_in_java_order[i] for i in filled.order]
    id_rank = np.empty(len(members), dtype=np.int64)
    id_rank[ids_in_java_order] = np.arange(len(members), dtype=np.int64)
    # A negative generation is no generation, as in Kafka's Subscription (NO_GENERATION is -1).
    generation = [
        DEFAULT_GENERATION if m.generation is None else max(m.generation, DEFAULT_GENERATION) for m in members
    ]
    has_generation = [g != DEFAULT_GENERATION for g in generation]

    as_indices = {
        topics: frozenset(topic_index[t] for t in topics if t in topic_index) for topics in distinct
    }
    claims = _claims(members, topic_index, offsets)
    total = int(offsets[-1])
    # Stale claims are settled with the others, each stale partition under an index past `total`.
    settled_member = np.concatenate((claims.member, claims.stale_member))
    settled_partition = np.concatenate((claims.partition, total + claims.stale_partition))
    held_all, multiple_all = _settle_claims(
        settled_member,
        settled_partition,
        iteration,
        generation,
        total=total + claims.stale_count,
    )
    real = len(claims.member)
    held, multiple = held_all[:real], multiple_all[:total]
    stale_held = held_all[real:]
    return StickyProblem(
        members=members,
        iteration=iteration,
        id_rank=id_rank,
        generation=generation,
        has_generation=has_generation,
        max_generation=max([DEFAULT_GENERATION, *generation]),
        topics=topics,
        topic_hash=[java_string_hash(t) for t in topics],
        counts=counts,
        offsets=offsets,
        total=total,
        subscribed=[as_indices[m.topics] for m in members],
        all_equal=_all_subscriptions_equal(members, iteration),
        claim_member=claims.member,
        claim_partition=claims.partition,
        claim_objects=claims.objects,
        held=held,
        multiple=multiple,
        stale_member=claims.stale_member[stale_held],
        stale_topic=claims.stale_topic[stale_held],
        racks=_rack_info(group, topics, offsets),
    )


@dataclass(slots=True)
class _Claims:
    """Owned partitions as arrays: those that exist (`member`, global `partition`, the reported
    TopicPartition `objects`), and the stale ones of subscribed topics (`stale_member`,
    `stale_topic`, `stale_partition`: a dense index over the distinct stale partitions)."""

    member: IntArray
    partition: IntArray
    objects: npt.NDArray[np.object_]
    stale_member: IntArray
    stale_topic: IntArray
    stale_partition: IntArray
    stale_count: int


def _claims(members: tuple[Member, ...], topic_index: dict[str, int], offsets: IntArray) -> _Claims:
    # C-level maps only: a million owned partitions cost no Python frame each.
    position: defaultdict[str, int] = defaultdict(_absent, topic_index)
    lengths = np.array([len(m.owned) for m in members], dtype=np.int64)
    count = int(lengths.sum())
    owned = chain.from_iterable(m.owned for m in members)
    topic = np.fromiter(map(position.__getitem__, map(_TOPIC, owned)), dtype=np.int64, count=count)
    owned = chain.from_iterable(m.owned for m in members)
    number = np.fromiter(map(_PARTITION, owned), dtype=np.int64, count=count)
    member = np.repeat(np.arange(len(members), dtype=np.int64), lengths)
    objects = np.fromiter(chain.from_iterable(m.owned for m in members), dtype=object, count=count)
    known = topic >= 0
    # Topic sizes with a sentinel of 0 at index -1, so unknown topics (-1) never exist.
    sizes = np.append(np.diff(offsets), 0)
    exists = number < sizes[topic]
    stale = known & ~exists
    stale_member, stale_topic, stale_number = member[stale], topic[stale], number[stale]
    keys = stale_topic * (int(stale_number.max(initial=0)) + 1) + stale_number
    distinct, stale_partition = np.unique(keys, return_inverse=True)
    if not bool(exists.all()):
        member, topic, number, objects = member[exists], topic[exists], number[exists], objects[exists]
    return _Claims(
        member=member,
        partition=offsets[topic] + number,
        objects=objects,
        stale_member=stale_member,
        stale_topic=stale_topic,
        stale_partition=stale_partition.astype(np.int64),
        stale_count=len(distinct),
    )


def _settle_claims(
    claim_member: IntArray,
    claim_partition: IntArray,
    iteration: list[int],
    generation: list[int],
    *,
    total: int,
) -> tuple[BoolArray, BoolArray]:
    """`allSubscriptionsEqual`'s bookkeeping of owned partitions: each partition claimed once is
    held by its claimant; claims of one partition by several members are replayed in the
    subscriptions' iteration order."""
    held = np.ones(len(claim_partition), dtype=np.bool_)
    multiple = np.zeros(total, dtype=np.bool_)
    if len(claim_partition) == 0:
        return held, multiple
    claimants = np.bincount(claim_partition, minlength=total)
    contested = np.flatnonzero(claimants[claim_partition] > 1)
    if len(contested) == 0:
        return held, multiple
    visit_rank = np.empty(len(iteration), dtype=np.int64)
    visit_rank[iteration] = np.arange(len(iteration), dtype=np.int64)
    order = contested[np.lexsort((visit_rank[claim_member[contested]], claim_partition[contested]))]
    held[contested] = False
    last_partition = -1
    last_member = -1
    last_claim = -1
    for claim in order.tolist():
        partition = int(claim_partition[claim])
        member = int(claim_member[claim])
        if partition != last_partition:
            held[claim] = True
            last_partition, last_member, last_claim = partition, member, claim
            continue
        mine, theirs = generation[member], generation[last_member]
        if mine == theirs:
            multiple[partition] = True
            held[last_claim] = False
            last_member, last_claim = member, claim
        elif mine > theirs:
            held[claim] = True
            held[last_claim] = False
            last_member, last_claim = member, claim
    return held, multiple


def _all_subscriptions_equal(members: tuple[Member, ...], iteration: list[int]) -> bool:
    """Kafka's test, quirk included: members with an empty subscription seen before the first
    non-empty one are skipped. Where that would make Kafka hand a member partitions of topics it
    does not subscribe to (an empty subscription in an 'equal' group), we answer False instead,
    so the general builder gives such a member nothing."""
    reference: frozenset[str] = frozenset()
    for m in iteration:
        topics = members[m].topics
        if not reference:
            reference = topics
        elif topics != reference:
            return False
    return not reference or all(members[m].topics for m in iteration)


def _rack_info(group: GroupInput, topics: list[str], offsets: IntArray) -> RackInfo | None:
    member_rack = [m.rack or None for m in group.members]
    consumers_in_rack: dict[str, int] = {}
    for rack in member_rack:
        if rack is not None:
            consumers_in_rack[rack] = consumers_in_rack.get(rack, 0) + 1
    if not consumers_in_rack:
        return None
    rack_sets: dict[frozenset[str], int] = {frozenset(): 0}
    set_of = np.zeros(int(offsets[-1]), dtype=np.int64)
    for t, topic in enumerate(topics):
        per_partition = group.partition_racks.get(topic)
        if per_partition is not None:
            count = int(offsets[t + 1] - offsets[t])
            ids = [rack_sets.setdefault(frozenset(r), len(rack_sets)) for r in per_partition[:count]]
            set_of[offsets[t] : offsets[t + 1]] = ids
    present = set(np.unique(set_of).tolist())
    used = [s for s, i in rack_sets.items() if i in present]
    all_racks = frozenset().union(*used)
    if all_racks.isdisjoint(consumers_in_rack) or set(used) == {all_racks}:
        return None
    names = sorted(all_racks | set(consumers_in_rack))
    index = {name: i for i, name in enumerate(names)}
    ordered = sorted(rack_sets, key=rack_sets.__getitem__)
    set_has_rack = np.zeros((len(ordered), len(names)), dtype=np.bool_)
    for i, racks in enumerate(ordered):
        set_has_rack[i, [index[r] for r in racks]] = True
    return RackInfo(
        member_rack=member_rack,
        rack_sets=ordered,
        set_of=set_of,
        near=np.array([sum(consumers_in_rack.get(r, 0) for r in racks) for racks in ordered], dtype=np.int64),
        set_has_rack=set_has_rack,
        member_rack_index=np.array([-1 if r is None else index[r] for r in member_rack], dtype=np.int64),
    )


def materialize(problem: StickyProblem, owner: IntArray) -> Assignment:
    """Every member with its partitions (`owner[g]` is the member of partition g, -1 for none),
    each list sorted by (topic, partition) as Python orders them. Owned TopicPartitions are
    reused; only newly assigned ones are created, straight into their final order."""
    result: Assignment = {m.member_id: [] for m in problem.members}
    if problem.total == 0 or len(problem.members) == 0:
        return result
    python_order = _python_position(problem)
    key = owner if python_order is None else owner[python_order]
    order = np.argsort(key, kind="stable")
    if python_order is not None:
        order = python_order[order]
    order = order[int(np.count_nonzero(owner < 0)) :]
    sizes = np.bincount(owner[owner >= 0], minlength=len(problem.members))
    bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
    with collector_paused(len(order) - len(problem.claim_partition)):
        if len(problem.claim_partition) == 0:
            grouped: list[TopicPartition] = _new_partitions(problem, order)
        else:
            objects = np.empty(problem.total, dtype=object)
            have = np.zeros(problem.total, dtype=np.bool_)
            objects[problem.claim_partition] = problem.claim_objects
            have[problem.claim_partition] = True
            missing = np.flatnonzero((owner >= 0) & ~have)
            if len(missing):
                objects[missing] = np.fromiter(
                    _new_partitions(problem, missing), dtype=object, count=len(missing)
                )
            grouped = objects[order].tolist()
        for m, member in enumerate(problem.members):
            if sizes[m]:
                result[member.member_id] = grouped[bounds[m] : bounds[m + 1]]
    return result


def _new_partitions(problem: StickyProblem, partitions: IntArray) -> list[TopicPartition]:
    """TopicPartitions for these indices, in this order, made by C-level maps (no Python frame
    per partition). Topic names are shared str objects; partition numbers are shared int
    objects too when many topics repeat them (creating them in order is cheaper otherwise)."""
    topic_of = problem.topic_of(partitions)
    names = np.array(problem.topics, dtype=object)[topic_of].tolist()
    numbers = partitions - problem.offsets[topic_of]
    largest = int(problem.counts.max())
    if 8 * largest <= len(partitions):
        numbers = np.arange(largest, dtype=np.int64).astype(object)[numbers]
    return list(map(tuple.__new__, repeat(TopicPartition), zip(names, numbers.tolist(), strict=True)))


def _python_position(problem: StickyProblem) -> IntArray | None:
    """Partitions in Python's (topic, partition) order, when that differs from Java's topic
    order (only for topic names with characters beyond the BMP); None when they agree."""
    python_topics = sorted(range(len(problem.topics)), key=lambda t: problem.topics[t])
    if python_topics == list(range(len(problem.topics))):
        return None
    return np.concatenate(
        [np.arange(problem.offsets[t], problem.offsets[t + 1], dtype=np.int64) for t in python_topics]
    )
