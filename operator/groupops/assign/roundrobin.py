"""`roundrobin`: Apache Kafka's RoundRobinAssignor (kafka-clients 4.x), to the partition.

Guarantees, in priority order:
1. Kafka's exact answer: all partitions of all subscribed topics are laid out in (topic, partition)
   order (topics in Java string order) and dealt one at a time to the members in Kafka's member
   order (static members by group.instance.id, then dynamic by member id, Java string order), with
   one cursor that is never reset between topics and that skips a member not subscribed to the
   partition's topic.
2. Balance when subscriptions are equal: counts within one of each other. With unequal
   subscriptions nothing is promised beyond 1 (the skipping can leave members far apart).
3. Stability for static members: the same group.instance.ids with the same subscriptions get the
   same partitions, whatever member ids the coordinator hands out.

Racks are ignored: KIP-881 made Range and the sticky assignors rack-aware, not RoundRobin.
Owned partitions and generations are ignored too (Kafka's RoundRobin is not sticky).

Example (seed 004): C0, C1 on t0 and t1 with 3 partitions each give C0 [t0p0, t0p2, t1p1] and
C1 [t0p1, t1p0, t1p2]; C0 on t0, C1 on t0 t1, C2 on t0 t1 t2 (1, 2, 3 partitions) give
C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].

How it is computed: within one topic the cursor visits the topic's subscribers cyclically,
starting at the first subscriber at or after the cursor, so the j-th of s subscribers in that
cycle gets partitions j, j + s, j + 2s, ...; after the topic the cursor stands just past the member
that got its last partition. That is O(members + partitions) with no per-partition Python loop
beyond building the TopicPartition values. Kafka fails on a group with no members; here the
answer is then the empty assignment.
"""

from __future__ import annotations

from bisect import bisect_left

from groupops.assign.common import (
    empty_assignment,
    kafka_ordered,
    sorted_lists,
    subscriber_positions,
    topic_partitions,
)
from groupops.model import Assignment, GroupInput, kafka_string_key

__all__ = ["NAME", "assign"]

NAME = "roundrobin"


def assign(group: GroupInput) -> Assignment:
    """Kafka's RoundRobinAssignor output for `group`; every member present, lists sorted."""
    assignment = empty_assignment(group)
    members = kafka_ordered(group.members)
    if not members:
        return assignment
    positions = subscriber_positions(group, members)
    topics = sorted(topic for topic in positions if group.topics[topic] > 0)
    java_order = sorted(topics, key=kafka_string_key)
    cursor = 0
    for topic in java_order:
        subscribers = positions[topic]
        count = group.topics[topic]
        width = len(subscribers)
        first = bisect_left(subscribers, cursor) % width
        partitions = list(topic_partitions(topic, range(count)))
        for offset in range(min(width, count)):
            member_id = members[subscribers[(first + offset) % width]].member_id
            assignment[member_id] += partitions[offset::width]
        cursor = (subscribers[(first + count - 1) % width] + 1) % len(members)
    # Lists are already in Java topic order; Python's differs only for characters beyond the BMP.
    if java_order != topics:
        sorted_lists(assignment)
    return assignment
