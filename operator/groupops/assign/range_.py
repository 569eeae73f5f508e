"""`range`: Apache Kafka's RangeAssignor, to the partition.

Guarantees: for each topic separately, its subscribers in Kafka's member order (static members
by group.instance.id, then dynamic by member id, Java string order) take consecutive ranges of
partitions; with n partitions and k subscribers every subscriber gets n // k and the first n % k
one more. Co-located: equal-sized topics with the same subscribers are split identically.

Example (seed 003): 10 partitions over C1-0, C2-0, C2-1 give 0-3 / 4-6 / 7-9; 11 partitions give
0-3 / 4-7 / 8-10; two topics of 10 repeat the split per topic (C1-0 gets two extra in all).
"""

from __future__ import annotations

from groupops.assign.common import empty_assignment, kafka_ordered, sorted_lists, subscribers_by_topic
from groupops.model import Assignment, GroupInput, TopicPartition

NAME = "range"


def assign(group: GroupInput) -> Assignment:
    assignment = empty_assignment(group)
    for topic, subscribers in subscribers_by_topic(group, kafka_ordered(group.members)).items():
        partition_count = group.topics[topic]
        min_quota, with_extra = divmod(partition_count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            length = min_quota + (1 if index < with_extra else 0)
            assignment[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return sorted_lists(assignment)
