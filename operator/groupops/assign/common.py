"""Helpers shared by the strategies: Kafka's member order, subscriptions, empty results."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain, repeat

from groupops.model import Assignment, GroupInput, Member, MemberId, TopicPartition


def kafka_ordered(members: Iterable[Member]) -> list[Member]:
    """Members in Kafka's order: static by group.instance.id, then dynamic by member id,
    comparing as Java does (UTF-16 code units). Python's sort is stable, as Java's is."""
    return sorted(members, key=Member.kafka_sort_key)


def empty_assignment(group: GroupInput) -> Assignment:
    return {member.member_id: [] for member in group.members}


def subscribers_by_topic(group: GroupInput, members: Iterable[Member]) -> dict[str, list[MemberId]]:
    """For each existing topic, its subscribers in the order of `members`."""
    by_topic: dict[str, list[MemberId]] = {}
    for member in members:
        for topic in member.topics:
            if topic in group.topics:
                by_topic.setdefault(topic, []).append(member.member_id)
    return by_topic


def sorted_lists(assignment: Assignment) -> Assignment:
    for partitions in assignment.values():
        partitions.sort()
    return assignment


def all_partitions(group: GroupInput, topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in topics for p in range(group.topics[topic])]


def topic_partitions(topic: str, partitions: Iterable[int]) -> Iterator[TopicPartition]:
    """TopicPartition(topic, p) for each p, built in C (tuple.__new__ on (topic, p) pairs): about
    twice as fast as calling the NamedTuple class, which matters at a million partitions."""
    return map(tuple.__new__, repeat(TopicPartition), zip(repeat(topic), partitions))


def subscriber_positions(group: GroupInput, ordered: Sequence[Member]) -> dict[str, list[int]]:
    """For each existing topic, the positions in `ordered` of its subscribers, ascending.

    Members with the same subscription are grouped first, so the cost is one pass over the
    members plus one per (distinct subscription, topic), not per (member, topic): 2,000 members
    on the same 500 topics cost 500 steps, not 1,000,000. Topics with the same subscribers share
    one list: callers must not modify the lists.
    """
    by_subscription: dict[frozenset[str], list[int]] = {}
    for position, member in enumerate(ordered):
        by_subscription.setdefault(member.topics, []).append(position)
    parts: dict[str, list[list[int]]] = {}
    for topics, positions in by_subscription.items():
        for topic in topics:
            if topic in group.topics:
                parts.setdefault(topic, []).append(positions)
    return {
        topic: lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
        for topic, lists in parts.items()
    }


_PROMOTE_AFTER = 100_000


@contextmanager
def collector_paused(created: int) -> Iterator[None]:
    """Pause the cyclic garbage collector while building `created` TopicPartitions.

    A million new (str, int) tuples make the collector run again and again for nothing (they
    cannot form cycles); pause it and restore the caller's setting. For large results also move
    what is now young straight to the old generation (gc.freeze + gc.unfreeze, two list splices),
    or the next young and middle collections would each walk every new tuple once more only to
    find it alive. The only effect on other objects: young cyclic garbage waits a little longer.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if created >= _PROMOTE_AFTER:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
