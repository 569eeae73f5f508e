"""The values every stage passes around: topic-partitions, members, one group's input, a plan.

Pure and frozen: no I/O, no Kubernetes, no Kafka client. The engine (`groupops.assign`), the
planner, the controller, the consumer runtime and the Spark pipeline all speak these types; the
JSON form of `GroupInput` (the `groupops assign` contract) is parsed in `groupops.contract`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, NewType, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = [
    "AssignOptions",
    "Assignment",
    "GroupInput",
    "LagValues",
    "Member",
    "MemberId",
    "Plan",
    "TopicPartition",
    "kafka_string_key",
]

MemberId = NewType("MemberId", str)


class TopicPartition(NamedTuple):
    """One partition of one topic. A tuple, so it sorts by (topic, partition) and is cheap to make
    by the million."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Assignment = dict[MemberId, list[TopicPartition]]
"""Every member of the group, mapped to the partitions it gets (possibly none)."""

LagValues: TypeAlias = Sequence[int] | npt.NDArray[np.int64]
"""One topic's lag per partition: any sequence of ints, or an int64 array (as the contract
parses them, and as the strategies compute with them)."""


def kafka_string_key(text: str) -> bytes:
    """Sort key that orders strings as Java's `String.compareTo` does: by UTF-16 code unit.

    Python compares by code point, which differs from Java only for characters beyond the BMP
    against characters in U+E000..U+FFFF; Kafka's assignors sort member ids with Java's order.
    """
    return text.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One consumer of the group as the assignor sees it.

    `generation` is the generation in which `owned` was assigned (Kafka's sticky assignors give a
    partition claimed by two members to the higher generation); `None` means unknown, as Kafka's
    DEFAULT_GENERATION. `capacity` scales the member's share of partitions and lag in `lag` and
    `balanced` (2.0 = twice as fast as a member of capacity 1.0; the other strategies ignore it).
    `priority` orders members for `failover`.
    """

    member_id: MemberId
    topics: frozenset[str]
    group_instance_id: str | None = None
    owned: tuple[TopicPartition, ...] = ()
    generation: int | None = None
    rack: str | None = None
    priority: int = 0
    capacity: float = 1.0

    def kafka_sort_key(self) -> tuple[int, bytes]:
        """Kafka's member order: static members first by group.instance.id, then dynamic
        members by member id (AbstractPartitionAssignor.MemberInfo.compareTo)."""
        if self.group_instance_id is not None:
            return (0, kafka_string_key(self.group_instance_id))
        return (1, kafka_string_key(self.member_id))


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignOptions:
    """Strategy options from the input's `options` object.

    max_moves: `balanced` moves at most this many owned partitions in one call (None: no cap).
    failback: `failover` hands partitions back to a returning higher-priority member; when False
    the member that owns them now keeps them while it is alive.
    """

    max_moves: int | None = None
    failback: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInput:
    """One group to assign: topics with partition counts, members, optional lag and racks.

    `lags[topic][p]` is the lag of partition p (0 where a topic has no entry);
    `partition_racks[topic][p]` is the set of racks holding a replica of partition p.

    `topics` is the cluster's metadata now; members report what they subscribe to and own, which
    may lag behind it, as in Kafka. A subscription may name a topic absent from `topics` (not yet
    created, or deleted): it contributes nothing. An owned partition may no longer exist (its
    topic was deleted, or recreated with fewer partitions): every strategy ignores it, and
    `stats` counts it as a revoked move. Kafka's assignors do the same: they only see the
    subscribed topics that the leader's metadata holds (`AbstractPartitionAssignor.assign`).
    """

    topics: Mapping[str, int]
    members: tuple[Member, ...]
    lags: Mapping[str, LagValues] = field(default_factory=dict)
    partition_racks: Mapping[str, Sequence[frozenset[str]]] = field(default_factory=dict)
    options: AssignOptions = field(default_factory=AssignOptions)

    def lag(self, tp: TopicPartition) -> int:
        per_partition = self.lags.get(tp.topic)
        return 0 if per_partition is None else int(per_partition[tp.partition])

    def exists(self, tp: TopicPartition) -> bool:
        """Whether the partition exists in `topics` (owned partitions may not)."""
        return 0 <= tp.partition < self.topics.get(tp.topic, 0)

    def missing_topics(self) -> list[str]:
        """Topics some member subscribes to that are not in `topics`, in sorted order."""
        return sorted(topic for topic in self._wanted() if topic not in self.topics)

    def subscribed_topics(self) -> list[str]:
        """Topics at least one member subscribes to, that exist, in sorted order."""
        return sorted(topic for topic in self._wanted() if topic in self.topics)

    def _wanted(self) -> set[str]:
        # Once per distinct subscription: 2,000 members on the same 500 topics cost 500 steps.
        return set().union(*{member.topics: None for member in self.members})

    def member_ids(self) -> list[MemberId]:
        return [member.member_id for member in self.members]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A published plan: the assignment the replicas must follow at `epoch` (monotonic)."""

    epoch: int
    strategy: str
    assignment: Mapping[MemberId, tuple[TopicPartition, ...]]
