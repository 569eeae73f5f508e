"""Helpers shared by the strategies: Kafka's member order, subscriptions, empty results."""

from __future__ import annotations

from collections.abc import Iterable

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
