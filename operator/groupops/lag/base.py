"""The one interface every lag source implements, and the snapshot they all return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from groupops.model import TopicPartition


class LagError(Exception):
    """Base of every lag-source failure."""


class LagSourceConfigError(LagError):
    """The source's spec is invalid; retrying will not help."""


class LagSourceUnavailable(LagError):
    """The source did not answer in time or refused the connection; transient."""


class UnknownTopicError(LagError):
    """A requested topic does not exist on the cluster; `topics` names them when known."""

    def __init__(self, message: str, topics: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.topics = topics


class LagAuthorizationError(LagError):
    """The source refused our credentials."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOffsets:
    """What the broker knows of one partition for one group. `committed` is None when the group
    never committed an offset for it."""

    log_start: int
    log_end: int
    committed: int | None


def lag_from_offsets(offsets: PartitionOffsets, auto_offset_reset: str) -> int:
    """Lag per docs/design.md §4: end - committed; with no commit, `latest` gives 0 and anything else the
    messages now in the partition (end - start). Never negative (a commit past the end after a
    truncation reads as 0). A commit below the log start still counts end - committed, as the
    seed and `kafka-consumer-groups --describe` do."""
    if offsets.committed is None:
        if auto_offset_reset == "latest":
            return 0
        return max(0, offsets.log_end - offsets.log_start)
    return max(0, offsets.log_end - offsets.committed)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAssignment:
    """Who owns what in a group, as the broker says (DescribeGroups). `members` maps each member's
    group.instance.id (its member id when not static) to its partitions."""

    group_id: str
    state: str
    members: Mapping[str, tuple[TopicPartition, ...]]

    @property
    def stable(self) -> bool:
        return self.state == "Stable"

    @property
    def exists(self) -> bool:
        return self.state not in {"Dead", "Unknown"}

    def owners(self) -> dict[TopicPartition, str]:
        """Partition -> the member owning it."""
        return {tp: member for member, owned in self.members.items() for tp in owned}


@dataclass(frozen=True, slots=True, kw_only=True)
class LagSnapshot:
    """Lag of one group at one moment. `lags[topic][p]` is partition p's lag; `offsets` keeps the
    raw numbers when the source has them (the pipeline's snapshots are built from it)."""

    group_id: str
    taken_at: float
    lags: Mapping[str, Sequence[int]]
    offsets: Mapping[TopicPartition, PartitionOffsets] | None = None
    partition_racks: Mapping[str, Sequence[frozenset[str]]] = field(default_factory=dict)
    """Racks of each partition's replicas (`kafka` source), for rack-aware plans; empty otherwise."""
    assignment: GroupAssignment | None = None
    """The group's members and their partitions, when the source read them (`kafka`)."""
    missing_topics: tuple[str, ...] = ()
    """Topics asked for that do not exist on the cluster (deleted, not created yet): absent from
    `lags`; the operator plans on the topics that remain (`kafka`, `prometheus`, `burrow`)."""
    topics_without_series: tuple[str, ...] = ()
    """Topics the source has no lag at all for (an exporter or Burrow that has not seen the group
    commit on them yet): in `lags`, every partition 0, the count from Kafka's metadata
    (`prometheus`, `burrow`). The operator plans on them and says so (`NoLagSeries`)."""

    def total(self) -> int:
        return sum(sum(per_topic) for per_topic in self.lags.values())


class SecretReader(Protocol):
    """Reads a Secret of the policy's namespace by name: its data, each value decoded from
    base64; None when no such Secret exists. May raise a LagError (the operator may not read it:
    LagSourceConfigError; the API cannot be reached: LagSourceUnavailable). The operator's
    implementation is `controller.lagaccess.PolicySecrets`."""

    def __call__(self, name: str) -> Mapping[str, bytes] | None: ...


class PartitionCounts(Protocol):
    """The partition count of each topic that exists, from the Kafka cluster's metadata; a topic
    that does not exist is left out; UnknownTopicError when none exists."""

    def __call__(self, topics: Sequence[str]) -> Mapping[str, int]: ...


class LagSource(Protocol):
    """A source of lag for one group. `read` raises a LagError subclass on failure."""

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot: ...

    def close(self) -> None: ...
