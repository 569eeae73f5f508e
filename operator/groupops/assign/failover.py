"""`failover`: active/passive by priority (shared/seeds/001's FailoverAssignor).

Guarantees, in priority order:
1. every partition of a topic goes to one member: the subscriber of that topic with the highest
   `priority` (with equal subscriptions, one member takes everything, as in the seed);
2. equal priorities: the first in Kafka's member order wins (static members by
   group.instance.id, then dynamic members by member id, Java string order), so the choice is
   stable across restarts of static members;
3. with `options.failback = false`, a live subscriber that owns partitions of the topic now keeps
   the topic even when a higher-priority member has come back (no flapping on return);
4. everyone else gets an empty list: hot standbys.

`capacity` is ignored: the active member consumes the whole topic whatever its speed, and a
faster standby is chosen by giving it a higher priority.

A subscription to a topic absent from `topics` gives nothing; owned partitions that no longer
exist (topic deleted, or beyond its count) are ignored, also by `failback: false`.

Example: A (priority 10), B (priority 20), both on t0 with 3 partitions: B [t0p0, t0p1, t0p2],
A []. With B gone: A takes all three.
"""

from __future__ import annotations

from groupops.assign.common import empty_assignment, kafka_ordered
from groupops.model import Assignment, GroupInput, Member, TopicPartition

NAME = "failover"


def assign(group: GroupInput) -> Assignment:
    assignment = empty_assignment(group)
    ordered = kafka_ordered(group.members)
    ranked = sorted(ordered, key=lambda m: -m.priority)  # stable: Kafka order breaks ties
    for topic in group.subscribed_topics():
        subscribers = [m for m in ranked if topic in m.topics]
        count = group.topics[topic]
        active = _active_for(topic, subscribers, count=count, failback=group.options.failback)
        assignment[active.member_id].extend(TopicPartition(topic, p) for p in range(count))
    return assignment


def _active_for(topic: str, ranked_subscribers: list[Member], *, count: int, failback: bool) -> Member:
    if not failback:
        # Only partitions that exist count: one beyond the topic's count (the topic was recreated
        # with fewer partitions) is owned by nobody now.
        for member in ranked_subscribers:
            if any(tp.topic == topic and tp.partition < count for tp in member.owned):
                return member
    return ranked_subscribers[0]
