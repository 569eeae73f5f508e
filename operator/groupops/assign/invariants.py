"""The invariants every strategy keeps, checked after every test case and in `--check` mode.

A broken invariant is a bug in the engine, never bad input: it raises `InvariantViolation`.
"""

from __future__ import annotations

from groupops.model import Assignment, GroupInput, TopicPartition


class InvariantViolation(AssertionError):
    """An assignment breaks a promise of the engine."""


def previous_owners(group: GroupInput) -> dict[TopicPartition, str]:
    """Who owned each partition before this call. A partition claimed by two members goes to the
    higher generation (unknown generation counts lowest); equal generations: the first claimant
    in Kafka's member order keeps it, as AbstractStickyAssignor resolves it."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    for member in sorted(group.members, key=lambda m: m.kafka_sort_key()):
        generation = -1 if member.generation is None else member.generation
        for tp in member.owned:
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, member.member_id)
    return {tp: owner for tp, (_, owner) in best.items()}


def check_assignment(
    group: GroupInput, assignment: Assignment, *, may_leave_moving_unassigned: bool = False
) -> None:
    """Every member present; lists sorted; each partition once, to a subscriber of its topic;
    every subscribed partition assigned (unless `may_leave_moving_unassigned` and the partition
    had a previous owner, as the cooperative protocol revokes before it reassigns)."""
    members = {member.member_id: member for member in group.members}
    if set(assignment) != set(members):
        missing = sorted(set(members) - set(assignment))
        extra = sorted(set(assignment) - set(members))
        raise InvariantViolation(
            f"assignment members differ from the group: missing {missing}, extra {extra}"
        )
    seen: dict[TopicPartition, str] = {}
    for member_id, partitions in assignment.items():
        if partitions != sorted(partitions):
            raise InvariantViolation(f"{member_id}: partitions not sorted by topic then partition")
        subscriptions = members[member_id].topics
        for tp in partitions:
            if tp.topic not in group.topics or not 0 <= tp.partition < group.topics[tp.topic]:
                raise InvariantViolation(f"{member_id}: {tp} does not exist")
            if tp.topic not in subscriptions:
                raise InvariantViolation(f"{member_id}: {tp} assigned but {tp.topic} not subscribed")
            if tp in seen:
                raise InvariantViolation(f"{tp} assigned to both {seen[tp]} and {member_id}")
            seen[tp] = member_id
    owners = previous_owners(group) if may_leave_moving_unassigned else {}
    for topic in group.subscribed_topics():
        for partition in range(group.topics[topic]):
            tp = TopicPartition(topic, partition)
            if tp not in seen and tp not in owners:
                raise InvariantViolation(f"{tp} is subscribed but assigned to nobody")
