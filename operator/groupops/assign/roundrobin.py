"""`roundrobin`: Apache Kafka's RoundRobinAssignor, to the partition.

Guarantees: all partitions of all subscribed topics are laid out in (topic, partition) order
(topics in Java string order) and dealt one at a time to the members in Kafka's member order,
with one cursor that is never reset between topics and that skips a member not subscribed to
the partition's topic. Equal subscriptions: counts within one of each other.

Example (seed 004): C0, C1 on t0 and t1 with 3 partitions each give C0 [t0p0, t0p2, t1p1] and
C1 [t0p1, t1p0, t1p2]; C0 on t0, C1 on t0 t1, C2 on t0 t1 t2 (1, 2, 3 partitions) give
C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
"""

from __future__ import annotations

from groupops.assign.common import empty_assignment, kafka_ordered, sorted_lists
from groupops.model import Assignment, GroupInput, TopicPartition, kafka_string_key

NAME = "roundrobin"


def assign(group: GroupInput) -> Assignment:
    assignment = empty_assignment(group)
    members = kafka_ordered(group.members)
    if not members:
        return assignment
    cursor = 0
    for topic in sorted(group.subscribed_topics(), key=kafka_string_key):
        for partition in range(group.topics[topic]):
            while topic not in members[cursor].topics:
                cursor = (cursor + 1) % len(members)
            assignment[members[cursor].member_id].append(TopicPartition(topic, partition))
            cursor = (cursor + 1) % len(members)
    return sorted_lists(assignment)
