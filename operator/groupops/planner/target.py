"""Policy + lag + taking-part identities -> the target assignment, and when to rebalance.

Stage: called by the controller's reconcile once it has read the lag and the live identities;
the result goes to the handoff step (two epochs) and then into the plan ConfigMap. Pure.

Steps of `compute_target`, in order:
1. build the engine's `GroupInput`: one static member per identity (member id = group.instance.id
   = identity), every member subscribed to every topic of the policy, `owned` = its set in the
   published plan (partitions that no longer exist dropped), priority and rack from the identity;
2. run the strategy (`groupops.assign.get_strategy`);
3. apply the move budget (`limit_moves`): a partition whose owner in the published plan still takes
   part counts as a move when the target gives it to someone else; beyond the budget, the moves of
   the most lag go first and the rest stay where they are (orphans, whose owner left, are free);
4. figures (`compute_stats`) for status: lag per member, max member lag, imbalance.

Identities and priorities: replica `i` is `<groupId>-<i>`. An identity with an explicit priority
(0..1,000,000 in the CRD) keeps it; the others get `default_priority(i) = -(i + 1)`, so they rank
below every explicit one and among themselves in ordinal order (replica 0 first). Scale-down
removes the highest ordinals first (`scale_down_order`).

Example: strategy `range`, topic orders with 4 partitions, identities g-0 and g-1, no plan yet:
g-0 gets orders-0, orders-1; g-1 gets orders-2, orders-3; 0 moves.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from groupops.assign import get_strategy
from groupops.assign.stats import AssignmentStats, compute_stats
from groupops.model import Assignment, AssignOptions, GroupInput, Member, MemberId, TopicPartition

__all__ = [
    "BUDGET_EXEMPT_STRATEGIES",
    "Identity",
    "Target",
    "TargetMemo",
    "TargetRequest",
    "Trigger",
    "build_group",
    "compute_target",
    "default_priority",
    "limit_moves",
    "rebalance_trigger",
    "scale_down_order",
    "stats_of",
]

BUDGET_EXEMPT_STRATEGIES = frozenset({"failover"})
"""`failover` moves a topic as a whole (one active member); splitting it by a budget would make
two members active at once, which is what the strategy exists to avoid."""


def default_priority(ordinal: int) -> int:
    """Priority of an identity the policy does not rank: below any explicit one, ordinal order."""
    return -(ordinal + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """One replica as the planner sees it. `name` is its group.instance.id."""

    name: str
    ordinal: int
    priority: int
    rack: str | None = None
    capacity: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRequest:
    """Everything one planning round needs.

    topics: partition count of every topic of the policy (from the lag snapshot);
    members: the identities taking part (live, not draining), any order;
    published: the plan the consumers follow now, identity -> partitions (empty before the first);
    lags: lag per partition, per topic; partition_racks: replica racks per partition (rack-aware);
    max_moves: the rebalance's move budget (None: no cap); failback: for `failover`.
    """

    strategy: str
    topics: Mapping[str, int]
    members: Sequence[Identity]
    published: Mapping[str, Sequence[TopicPartition]] = field(default_factory=dict)
    lags: Mapping[str, Sequence[int]] = field(default_factory=dict)
    partition_racks: Mapping[str, Sequence[frozenset[str]]] = field(default_factory=dict)
    max_moves: int | None = None
    failback: bool = True
    epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The planning result. `group` is exactly the engine's input, so `groupops assign` on its JSON
    (`groupops.contract.group_to_json`) reproduces `engine_assignment`; `assignment` is that after
    the move budget. `moves` counts partitions leaving a still-present owner; `deferred` the moves
    the budget left for a later round."""

    assignment: Assignment
    engine_assignment: Assignment
    group: GroupInput
    stats: AssignmentStats
    moves: int
    deferred: int


def build_group(request: TargetRequest) -> GroupInput:
    topics = dict(request.topics)
    subscribed = frozenset(request.topics)
    members = tuple(
        Member(
            member_id=MemberId(identity.name),
            group_instance_id=identity.name,
            topics=subscribed,
            owned=_existing(request.published.get(identity.name, ()), topics),
            generation=request.epoch if request.published.get(identity.name) else None,
            rack=identity.rack,
            priority=identity.priority,
            capacity=identity.capacity,
        )
        for identity in sorted(request.members, key=lambda i: i.ordinal)
    )
    lags = {topic: tuple(per) for topic, per in request.lags.items() if topic in topics}
    racks = {topic: tuple(per) for topic, per in request.partition_racks.items() if topic in topics}
    options = AssignOptions(max_moves=request.max_moves, failback=request.failback)
    return GroupInput(topics=topics, members=members, lags=lags, partition_racks=racks, options=options)


def _existing(partitions: Iterable[TopicPartition], topics: Mapping[str, int]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(tp for tp in partitions if tp.partition < topics.get(tp.topic, 0)))


def compute_target(request: TargetRequest) -> Target:
    """Run the strategy on the request and apply the move budget; see the module's steps."""
    group = build_group(request)
    engine_assignment = get_strategy(request.strategy)(group)
    budget = None if request.strategy in BUDGET_EXEMPT_STRATEGIES else request.max_moves
    assignment, moves, deferred = limit_moves(group, engine_assignment, budget)
    return Target(
        assignment=assignment,
        engine_assignment=engine_assignment,
        group=group,
        stats=compute_stats(group, assignment),
        moves=moves,
        deferred=deferred,
    )


class TargetMemo:
    """The last planning round's request, with its target and the figures asked of it.

    Between rebalances a routine reconcile builds the same request again (same members, plan
    and lag): the strategies and `compute_stats` are pure functions of it, so the memo answers
    from the last round instead of running the strategy and the figures again (about a fifth of
    a steady reconcile's CPU: docs/design.md §8.3). A request that differs in anything starts
    over. The answers are shared: callers read them and never change them. One memo per policy,
    used by one reconcile at a time (the policy's lock)."""

    _KEPT_STATS = 4

    def __init__(self) -> None:
        self._request: TargetRequest | None = None
        self._target: Target | None = None
        self._stats: list[tuple[Mapping[str, Sequence[TopicPartition]], AssignmentStats]] = []

    def _for(self, request: TargetRequest) -> None:
        if request != self._request:
            self._request, self._target, self._stats = request, None, []

    def target(self, request: TargetRequest) -> Target:
        self._for(request)
        if self._target is None:
            self._target = compute_target(request)
        return self._target

    def stats(
        self, request: TargetRequest, assignment: Mapping[str, Sequence[TopicPartition]]
    ) -> AssignmentStats:
        self._for(request)
        for known, figures in self._stats:
            if known == assignment:
                return figures
        figures = stats_of(request, assignment)
        self._stats = [*self._stats[-(self._KEPT_STATS - 1) :], (assignment, figures)]
        return figures


def limit_moves(group: GroupInput, target: Assignment, budget: int | None) -> tuple[Assignment, int, int]:
    """Keep at most `budget` moves of `target` relative to the members' `owned` sets.

    Returns (assignment, moves made, moves deferred). The moves with the most lag are made first
    (ties by partition order), since they fix the most imbalance; a deferred partition stays with
    its current owner. The result is still a partition of the same partitions over the same
    members.
    """
    owner = {tp: member.member_id for member in group.members for tp in member.owned}
    moving = sorted(
        (
            (tp, member_id)
            for member_id, tps in target.items()
            for tp in tps
            if tp in owner and owner[tp] != member_id
        ),
        key=lambda item: (-group.lag(item[0]), item[0]),
    )
    if budget is None or len(moving) <= budget:
        return {m: sorted(tps) for m, tps in target.items()}, len(moving), 0
    kept_back = {tp for tp, _ in moving[budget:]}
    result: Assignment = {
        member_id: [tp for tp in tps if tp not in kept_back] for member_id, tps in target.items()
    }
    for tp in kept_back:
        result[owner[tp]].append(tp)
    return {m: sorted(tps) for m, tps in result.items()}, budget, len(moving) - budget


def stats_of(request: TargetRequest, assignment: Mapping[str, Sequence[TopicPartition]]) -> AssignmentStats:
    """Figures of an existing assignment (the published plan) under the request's lag, for the
    imbalance trigger and for status between rebalances. Identities not taking part are left out."""
    group = build_group(request)
    taking_part = {member.member_id for member in group.members}
    current: Assignment = {member_id: [] for member_id in taking_part}
    for identity, partitions in assignment.items():
        if MemberId(identity) in taking_part:
            current[MemberId(identity)] = _live_partitions(partitions, group.topics)
    return compute_stats(group, current)


def _live_partitions(partitions: Iterable[TopicPartition], topics: Mapping[str, int]) -> list[TopicPartition]:
    return sorted(tp for tp in partitions if tp.partition < topics.get(tp.topic, 0))


def scale_down_order(ordinals: Iterable[int], replicas: int) -> list[int]:
    """The ordinals to remove when scaling to `replicas`: every ordinal >= replicas, highest first."""
    return sorted((o for o in ordinals if o >= replicas), reverse=True)


class Trigger(enum.Enum):
    """Why a planning round publishes a new plan (the reason of the rebalance Event). The first
    five keep the plan correct and are never damped (`rebalance_trigger`); the others are
    judged by `planner.damping` (a cooldown, and for the lag-driven three an improvement)."""

    INITIAL = "Initial"
    SPEC_CHANGED = "SpecChanged"
    MEMBERSHIP_CHANGED = "MembershipChanged"
    PARTITIONS_CHANGED = "PartitionsChanged"
    HANDOFF = "Handoff"
    COUNTS_UNEVEN = "CountsUneven"
    IMBALANCE = "ImbalanceExceeded"
    INTERVAL = "Interval"
    TIME_LAG_ABOVE_GOAL = "TimeLagAboveGoal"


def rebalance_trigger(
    *,
    published: Mapping[str, Sequence[TopicPartition]] | None,
    published_members: Iterable[str] | None,
    spec_changed: bool,
    members: Iterable[str],
    topics: Mapping[str, int],
    releasing: Iterable[TopicPartition] = (),
) -> Trigger | None:
    """The first reason, in this order, that the plan must change now to stay correct; None when
    only lag could call for a replan (`planner.damping` judges those).

    `published_members` are the identities that took part when the plan was made (the plan also
    lists identities that take no part, with empty sets). `spec_changed`: the spec changed in
    what the target depends on since the plan was made. A plan that does not cover exactly the
    topics' partitions is replanned at once: `Handoff` when the ones it leaves out are exactly
    those still `releasing` from their previous owners (a move half way: its next epoch), else
    `PartitionsChanged` (a topic grew, shrank, appeared or went).
    """
    if published is None:
        return Trigger.INITIAL
    if spec_changed:
        return Trigger.SPEC_CHANGED
    if published_members is None or set(published_members) != set(members):
        return Trigger.MEMBERSHIP_CHANGED
    covered = sorted(tp for partitions in published.values() for tp in partitions)
    expected = [TopicPartition(topic, p) for topic in sorted(topics) for p in range(topics[topic])]
    if covered == expected:
        return None
    if sorted([*covered, *releasing]) == expected:
        return Trigger.HANDOFF
    return Trigger.PARTITIONS_CHANGED
