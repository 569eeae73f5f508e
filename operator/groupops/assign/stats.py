"""Figures of one assignment: per-member count and lag, max member lag, its lower bound, moves.

Member lag is the sum of its partitions' lag; `weighted_lag` divides by the member's capacity,
and `max_member_lag` is the largest weighted lag (equal to raw lag when every capacity is 1).
The lower bound holds for every assignment of the group: no member can do better than the total
spread over all capacity, nor than the largest partition on the most capable subscriber.
"""

from __future__ import annotations

from typing import TypedDict

from groupops.assign.invariants import previous_owners
from groupops.model import Assignment, GroupInput, MemberId


class MemberStats(TypedDict):
    count: int
    lag: int
    weighted_lag: float


class AssignmentStats(TypedDict):
    members: dict[str, MemberStats]
    total_lag: int
    max_member_lag: float
    lower_bound: float
    imbalance: float
    moves: int
    unassigned: int


def lower_bound(group: GroupInput) -> float:
    """Max-member-lag lower bound: max(total / total capacity, each partition's lag on the most
    capable member subscribed to its topic)."""
    capacity_by_topic: dict[str, float] = {}
    total_capacity = 0.0
    for member in group.members:
        subscribed = [topic for topic in member.topics if topic in group.topics]
        if subscribed:
            total_capacity += member.capacity
        for topic in subscribed:
            capacity_by_topic[topic] = max(capacity_by_topic.get(topic, 0.0), member.capacity)
    total = 0
    biggest = 0.0
    for topic, capacity in capacity_by_topic.items():
        lags = group.lags.get(topic)
        if lags is None or len(lags) == 0:
            continue
        total += int(sum(int(lag) for lag in lags))
        biggest = max(biggest, int(max(lags)) / capacity)
    if total_capacity == 0:
        return 0.0
    return max(total / total_capacity, biggest)


def compute_stats(group: GroupInput, assignment: Assignment) -> AssignmentStats:
    capacities = {member.member_id: member.capacity for member in group.members}
    members: dict[str, MemberStats] = {}
    assigned = 0
    total = 0
    for member_id, partitions in assignment.items():
        lag = sum(group.lag(tp) for tp in partitions)
        members[member_id] = {
            "count": len(partitions),
            "lag": lag,
            "weighted_lag": lag / capacities[MemberId(member_id)],
        }
        assigned += len(partitions)
        total += lag
    owners = previous_owners(group)
    owner_now = {tp: member_id for member_id, partitions in assignment.items() for tp in partitions}
    moves = sum(1 for tp, owner in owners.items() if owner_now.get(tp) != owner)
    subscribed = sum(group.topics[topic] for topic in group.subscribed_topics())
    max_lag = max((m["weighted_lag"] for m in members.values()), default=0.0)
    bound = lower_bound(group)
    return {
        "members": members,
        "total_lag": total,
        "max_member_lag": max_lag,
        "lower_bound": bound,
        "imbalance": max_lag / bound if bound > 0 else 1.0,
        "moves": moves,
        "unassigned": subscribed - assigned,
    }
