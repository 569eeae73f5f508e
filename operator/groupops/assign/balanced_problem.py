"""`balanced`'s working form of a group: flat numpy arrays indexed by member and partition.

Called only by `groupops.assign.balanced` and its helpers. Partitions get a global index in
(topic, partition) order, topics sorted as Python sorts strings, which is also the order of
sorted `TopicPartition` lists, so turning an owner array back into sorted lists needs no sort by
name. Members are indexed in Kafka's member order (static by group.instance.id, then dynamic by
member id), which makes every tie-break stable across restarts of static members.

Only topics that exist, have partitions and have a subscriber are kept. Members are grouped into
subscription classes (identical sets of kept topics); `uniform` means one class holds every
member that can take a partition, the common case with a numpy fast path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat

import numpy as np
import numpy.typing as npt

from groupops.assign.common import collector_paused, kafka_ordered
from groupops.model import Assignment, GroupInput, Member, TopicPartition

__all__ = ["BoolArray", "FloatArray", "IntArray", "Problem", "build_problem", "to_assignment"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One group, flattened. Arrays are never mutated after `build_problem`."""

    members: tuple[Member, ...]
    """In Kafka's member order; index i everywhere below is this order."""
    topics: tuple[str, ...]
    offsets: IntArray
    """Global index of partition p of topics[t] is offsets[t] + p; offsets[-1] = partition count."""
    topic_of: IntArray
    lag: FloatArray
    capacity: FloatArray
    class_of: IntArray
    """Subscription class of each member; -1 for a member subscribed to no kept topic."""
    class_topics: BoolArray
    """[class, topic]: the class subscribes to the topic."""
    previous: IntArray
    """Previous owner of each partition (invariants.previous_owners rules), -1 for none."""
    max_moves: int | None
    lost: int
    """Owned partitions nobody can take now: of topics with no subscriber left, of topics no
    longer in `topics` (deleted) and beyond their topic's count. Moves already made, as the
    stats count them."""

    @property
    def partition_count(self) -> int:
        return int(self.offsets[-1])

    @property
    def member_count(self) -> int:
        return len(self.members)

    @property
    def uniform(self) -> bool:
        return bool(self.class_topics.shape[0] <= 1)

    def active(self) -> IntArray:
        """Members that can take at least one partition."""
        return np.flatnonzero(self.class_of >= 0)

    def loads(self, owner: IntArray) -> FloatArray:
        """Sum of lag per member; unassigned partitions (owner -1) count for nobody."""
        held = owner >= 0
        weights = self.lag[held]
        return np.bincount(owner[held], weights=weights, minlength=self.member_count).astype(np.float64)

    def counts(self, owner: IntArray) -> IntArray:
        return np.bincount(owner[owner >= 0], minlength=self.member_count).astype(np.int64)

    def max_lag(self, owner: IntArray) -> float:
        """Largest member lag divided by that member's capacity (the stats' `max_member_lag`)."""
        if self.member_count == 0 or self.partition_count == 0:
            return 0.0
        return float(np.max(self.loads(owner) / self.capacity))

    def moves(self, owner: IntArray) -> int:
        """Previously owned partitions whose owner changes, as the stats count them (`lost` included)."""
        return self.lost + int(np.count_nonzero((self.previous >= 0) & (owner != self.previous)))

    def lower_bound(self) -> float:
        """stats.lower_bound, vectorised: max(total / total capacity, biggest on best subscriber)."""
        active = self.active()
        if len(active) == 0 or self.partition_count == 0:
            return 0.0
        total = float(self.lag.sum()) / float(self.capacity[active].sum())
        biggest = 0.0
        for t in range(len(self.topics)):
            lags = self.lag[self.offsets[t] : self.offsets[t + 1]]
            best = float(np.max(self.capacity[active][self.class_topics[self.class_of[active], t]]))
            biggest = max(biggest, float(lags.max()) / best)
        return max(total, biggest)


def build_problem(group: GroupInput) -> Problem:
    members = tuple(kafka_ordered(group.members))
    topics = tuple(t for t in group.subscribed_topics() if group.topics[t] > 0)
    topic_index = {topic: t for t, topic in enumerate(topics)}
    sizes = np.array([group.topics[topic] for topic in topics], dtype=np.int64)
    offsets = np.zeros(len(topics) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    topic_of = np.repeat(np.arange(len(topics), dtype=np.int64), sizes)
    lag = np.zeros(int(offsets[-1]), dtype=np.float64)
    for topic, t in topic_index.items():
        given = group.lags.get(topic)
        if given is not None:
            lag[offsets[t] : offsets[t + 1]] = np.asarray(given, dtype=np.float64)

    # One row per distinct subscription, not per member: 1,000 members on the same 1,000 topics
    # cost 1,000 steps, not 1,000,000. Distinct sets equal on the kept topics merge in np.unique.
    distinct: dict[frozenset[str], int] = {}
    subscription = np.array([distinct.setdefault(m.topics, len(distinct)) for m in members], dtype=np.int64)
    rows = np.zeros((len(distinct), len(topics)), dtype=np.bool_)
    for topic_set, k in distinct.items():
        rows[k, [topic_index[topic] for topic in topic_set if topic in topic_index]] = True
    active = rows.any(axis=1)
    class_topics, inverse = np.unique(rows[active], axis=0, return_inverse=True)
    class_of_row = np.full(len(distinct), -1, dtype=np.int64)
    class_of_row[active] = inverse.reshape(-1)
    class_of = class_of_row[subscription]

    previous, lost = _previous_owners(members, topic_index, offsets, group.topics)
    return Problem(
        members=members,
        topics=topics,
        offsets=offsets,
        topic_of=topic_of,
        lag=lag,
        capacity=np.array([member.capacity for member in members], dtype=np.float64),
        class_of=class_of,
        class_topics=class_topics.astype(np.bool_),
        previous=previous,
        max_moves=group.options.max_moves,
        lost=lost,
    )


def _previous_owners(
    members: tuple[Member, ...], topic_index: dict[str, int], offsets: IntArray, topics: Mapping[str, int]
) -> tuple[IntArray, int]:
    """invariants.previous_owners, vectorised: the highest generation claims a partition; equal
    generations go to the first claimant in Kafka's member order (`members` is in that order).
    Also counts the owned partitions nobody can take now (`Problem.lost`)."""
    previous = np.full(int(offsets[-1]), -1, dtype=np.int64)
    start = {topic: int(offsets[t]) for topic, t in topic_index.items()}
    lost: set[tuple[str, int]] = set()
    claimants = [i for i, member in enumerate(members) if member.owned]
    claimants.sort(key=lambda i: -_generation(members[i]))
    for i in claimants:
        ids: list[int] = []
        for topic, partition in members[i].owned:
            first = start.get(topic)
            if first is not None and 0 <= partition < topics[topic]:
                ids.append(first + partition)
            else:
                lost.add((topic, partition))
        claimed = np.array(ids, dtype=np.int64)
        claimed = claimed[previous[claimed] < 0]
        previous[claimed] = i
    return previous, len(lost)


def _generation(member: Member) -> int:
    return -1 if member.generation is None else member.generation


def to_assignment(group: GroupInput, problem: Problem, owner: IntArray) -> Assignment:
    """Owner array to `{member_id: sorted partitions}`, every member of the group present."""
    with collector_paused(problem.partition_count):
        return _lists(group, problem, owner)


def _lists(group: GroupInput, problem: Problem, owner: IntArray) -> Assignment:
    assignment: Assignment = {member.member_id: [] for member in group.members}
    by_owner = np.argsort(owner, kind="stable")  # stable: each member's ids stay ascending
    bounds = np.searchsorted(owner[by_owner], np.arange(problem.member_count + 1))
    names = np.array(problem.topics, dtype=object)
    numbers = np.arange(problem.partition_count) - problem.offsets[problem.topic_of]
    for i, member in enumerate(problem.members):
        ids = by_owner[bounds[i] : bounds[i + 1]]
        if len(ids):
            pairs = zip(names[problem.topic_of[ids]].tolist(), numbers[ids].tolist(), strict=True)
            assignment[member.member_id] = list(map(tuple.__new__, repeat(TopicPartition), pairs))
    return assignment
