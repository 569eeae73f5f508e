"""The `kafka` lag source: a group's lag read from the cluster itself through the Admin API
(confluent-kafka's AdminClient over librdkafka).

Who calls it: `groupops lag`, `groupops assign --lag-from-kafka`, `groupops snapshot`, the
operator's native agreement, and the operator's lag step through
`groupops.controller.lagfleet`, which shares one connection per cluster between policies.

One `read` is up to five round trips, all bounded by one deadline (`timeout_s`, default 6 s, so
that a dead cluster is reported well within 10 s):
1. DescribeGroups: whether the group exists at all;
2. (no topics given) OffsetFetch for the whole group: the topics it committed on;
3. DescribeTopics: partitions of each topic and the racks of their replicas;
4. OffsetFetch: the group's committed offsets (skipped for an unknown group);
5. ListOffsets, earliest and latest at once: log start and log end of every partition.
A transient answer (coordinator moving or loading, leader election) is retried with backoff
inside the deadline. Lag per partition is then `lag_from_offsets` (docs/design.md §4: end − committed;
no commit: `latest` → 0, anything else → end − start).

`read_group_offsets` is that read, written once: the connection (`KafkaAdmin`, in
groupops.lag.kafka_admin) answers the per-group round trips (2, 4), and a `ClusterRequests`
answers the per-cluster ones (1, 3, 5): the connection itself in `KafkaLagSource`, and in the
operator a reader that batches them for every policy on the connection
(groupops.controller.lagfleet).

Errors (the base tree is in groupops.lag.base):
    LagError
    ├── LagSourceConfigError   bad settings: unknown librdkafka property, bad auto.offset.reset
    ├── LagSourceUnavailable   no answer within the deadline (broker down or unreachable), or
    │                          a transient answer that outlasted it
    ├── UnknownTopicError      a topic does not exist (UNKNOWN_TOPIC_OR_PART)
    ├── UnknownGroupError      the group does not exist, only with `require_group=True`;
    │                          otherwise every partition follows the reset rule and
    │                          `GroupOffsets.group_known` is False
    └── LagAuthorizationError  SASL authentication failed, or an ACL denies the topic/group
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from groupops.lag.base import (
    GroupAssignment,
    LagError,
    LagSnapshot,
    LagSourceConfigError,
    PartitionOffsets,
    UnknownTopicError,
    lag_from_offsets,
)
from groupops.lag.kafka_admin import (
    ClusterRequests,
    Deadline,
    KafkaAdmin,
    OffsetQuery,
    code_of,
    map_error,
    retrying,
)
from groupops.model import TopicPartition

if TYPE_CHECKING:
    from groupops.lag.history import HistorySink
    from groupops.lag.registry import SourceContext

__all__ = [
    "AUTO_OFFSET_RESET_VALUES",
    "GroupAssignment",
    "GroupOffsets",
    "KafkaLagSettings",
    "KafkaLagSource",
    "UnknownGroupError",
    "from_spec",
    "lag_snapshot",
    "normalize_auto_offset_reset",
    "read_group_offsets",
    "read_partition_counts",
    "settings_from_spec",
]

# The name the error mapping had when it lived here (tests/unit/lag imports it by that name).
_map_error = map_error

# librdkafka's spellings of auto.offset.reset; the lag rule only distinguishes `latest`.
_LATEST_ALIASES = frozenset({"latest", "largest", "end"})
AUTO_OFFSET_RESET_VALUES = ("earliest", "latest", "smallest", "largest", "beginning", "end", "error", "none")


class UnknownGroupError(LagError):
    """The consumer group does not exist on the cluster (raised only with `require_group`)."""


def normalize_auto_offset_reset(value: str) -> str:
    """`latest` for librdkafka's latest spellings, `earliest` for the earliest ones, the value
    itself for `error`/`none`; LagSourceConfigError for anything else."""
    lowered = value.strip().lower()
    if lowered not in AUTO_OFFSET_RESET_VALUES:
        raise LagSourceConfigError(
            f"auto.offset.reset must be one of {', '.join(AUTO_OFFSET_RESET_VALUES)}, not {value!r}"
        )
    if lowered in _LATEST_ALIASES:
        return "latest"
    if lowered in {"smallest", "beginning"}:
        return "earliest"
    return lowered


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaLagSettings:
    """How to reach the cluster and read lag.

    bootstrap_servers: `host:port[,host:port...]`.
    auto_offset_reset: the group's reset policy, which decides the lag of never-committed
        partitions (librdkafka spellings accepted).
    timeout_s: bound on one whole `read`, connection included; 6 s keeps a dead cluster's error
        under 10 s with margin for the client's own shutdown.
    require_group: raise UnknownGroupError for a group the cluster does not know, instead of
        reading every partition under the reset rule.
    client_config: extra librdkafka properties, by librdkafka's own names (`security.protocol`,
        `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`, ...).
    """

    bootstrap_servers: str
    auto_offset_reset: str = "earliest"
    timeout_s: float = 6.0
    require_group: bool = False
    client_config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise LagSourceConfigError("bootstrap_servers is empty")
        if "bootstrap.servers" in self.client_config:
            raise LagSourceConfigError(
                "client_config sets bootstrap.servers; give the brokers in bootstrap_servers only"
            )
        if not 0 < self.timeout_s <= 300:
            raise LagSourceConfigError(f"timeout_s must be in (0, 300], not {self.timeout_s}")
        object.__setattr__(self, "auto_offset_reset", normalize_auto_offset_reset(self.auto_offset_reset))


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOffsets:
    """Everything one `read_group` learned: partition counts, replica racks, the raw offsets.

    `group_known` is False when the cluster has no such group (no members, no commits): then
    every partition has `committed=None`.
    """

    group_id: str
    group_known: bool
    group_state: str
    taken_at: float
    partitions: Mapping[str, int]
    partition_racks: Mapping[str, Sequence[frozenset[str]]]
    offsets: Mapping[TopicPartition, PartitionOffsets]
    assignment: GroupAssignment | None = None
    """Who owns what (DescribeGroups, the same read); None when not looked at."""
    missing_topics: tuple[str, ...] = ()
    """Topics asked for that do not exist; at least one asked for does (else UnknownTopicError)."""

    @property
    def owners(self) -> Mapping[TopicPartition, str] | None:
        """Partition -> member owning it; None when membership was not looked at."""
        return None if self.assignment is None else self.assignment.owners()

    def snapshot(self, auto_offset_reset: str) -> LagSnapshot:
        """The lag snapshot under a reset policy (docs/design.md §4's rule, per partition)."""
        policy = normalize_auto_offset_reset(auto_offset_reset)
        lags = {
            topic: [lag_from_offsets(self.offsets[TopicPartition(topic, p)], policy) for p in range(count)]
            for topic, count in self.partitions.items()
        }
        return LagSnapshot(
            group_id=self.group_id,
            taken_at=self.taken_at,
            lags=lags,
            offsets=dict(self.offsets),
            partition_racks=dict(self.partition_racks),
            assignment=self.assignment,
            missing_topics=self.missing_topics,
        )


_SPEC_KEYS = {"timeoutSeconds": float, "requireGroup": bool}


def settings_from_spec(spec: Mapping[str, Any], context: SourceContext) -> KafkaLagSettings:
    """The source's settings from the policy: the connection comes from the policy's `kafka`
    block via `context`; `spec` (`lagSource.kafka`, may be empty) may set `timeoutSeconds` and
    `requireGroup`."""
    for key, value in spec.items():
        expected = _SPEC_KEYS.get(key)
        if expected is None:
            raise LagSourceConfigError(
                f"lagSource.kafka.{key}: unknown field; known: {', '.join(sorted(_SPEC_KEYS))}"
            )
        # bool is an int in Python: a number must not be a bool, and a flag must be one.
        matches = isinstance(value, bool) if expected is bool else isinstance(value, int | float)
        if not matches or (expected is float and isinstance(value, bool)):
            raise LagSourceConfigError(f"lagSource.kafka.{key}: expected {expected.__name__}, got {value!r}")
    return KafkaLagSettings(
        bootstrap_servers=context.bootstrap_servers,
        auto_offset_reset=context.auto_offset_reset,
        timeout_s=float(spec.get("timeoutSeconds", context.timeout_seconds)),
        require_group=bool(spec.get("requireGroup", False)),
        client_config=dict(context.client_config),
    )


def from_spec(spec: Mapping[str, Any], context: SourceContext) -> KafkaLagSource:
    """The registry's constructor (groupops.lag.registry), with `settings_from_spec`'s rules."""
    return KafkaLagSource(settings_from_spec(spec, context), history=context.history)


class KafkaLagSource:
    """The `kafka` LagSource. Holds one connection (`KafkaAdmin`) and makes every request of a
    read itself; call close() (or use `with`) when done."""

    def __init__(self, settings: KafkaLagSettings, *, history: HistorySink | None = None) -> None:
        self.settings = settings
        self._history = history
        self._admin = KafkaAdmin(settings.bootstrap_servers, settings.client_config)

    def __enter__(self) -> KafkaLagSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the client at once (librdkafka then ends its connections and threads)."""
        self._admin.close()

    @property
    def admin(self) -> KafkaAdmin:
        """The connection, for the few requests beyond a read (groupops.lag.reset)."""
        return self._admin

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        """Lag of `group_id` on `topics` (all topics the group committed on, when empty); the
        offsets read are appended to the offset history when the source has one."""
        offsets = self.read_group(group_id, topics)
        return lag_snapshot(offsets, self.settings, history=self._history)

    def partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        """Each existing topic's partition count from the cluster's metadata (UnknownTopicError
        when none exists): what the operator plans by when the lag source is down, and what the
        HTTP sources count partitions by."""
        return read_partition_counts(self.settings, topics, admin=self._admin)

    def read_group(self, group_id: str, topics: Sequence[str]) -> GroupOffsets:
        """The raw offsets behind `read`, plus whether the group exists and replica racks."""
        return read_group_offsets(self.settings, group_id, topics, admin=self._admin)

    def assignment(self, group_id: str) -> GroupAssignment:
        """The broker's actual assignment of `group_id` (an unknown group has no members)."""
        deadline = Deadline(self.settings.timeout_s, self.settings.bootstrap_servers)
        return _GroupRead(self._admin, self._admin, deadline).group(group_id)


def lag_snapshot(
    offsets: GroupOffsets, settings: KafkaLagSettings, *, history: HistorySink | None
) -> LagSnapshot:
    """What a `read` returns for the offsets it read, after appending them to the offset history
    (when there is one; a failed append is logged by the history, never raised)."""
    if history is not None:
        history.record(offsets, bootstrap=settings.bootstrap_servers, client_config=settings.client_config)
    return offsets.snapshot(settings.auto_offset_reset)


def read_partition_counts(
    settings: KafkaLagSettings,
    topics: Sequence[str],
    *,
    admin: KafkaAdmin,
    cluster: ClusterRequests | None = None,
) -> dict[str, int]:
    """Round trip 3 alone (DescribeTopics) within `settings.timeout_s`: the partition count of
    each topic that exists; UnknownTopicError when none does."""
    deadline = Deadline(settings.timeout_s, settings.bootstrap_servers)
    counts, _ = _GroupRead(admin, admin if cluster is None else cluster, deadline).describe_topics(
        sorted(set(topics))
    )
    return counts


def read_group_offsets(
    settings: KafkaLagSettings,
    group_id: str,
    topics: Sequence[str],
    *,
    admin: KafkaAdmin,
    cluster: ClusterRequests | None = None,
) -> GroupOffsets:
    """One read of `group_id` (the module docstring's five round trips) within
    `settings.timeout_s`: the per-group requests on `admin`, the per-cluster ones on `cluster`
    (default: `admin` too, one request each)."""
    if not group_id:
        raise LagSourceConfigError("group id is empty")
    deadline = Deadline(settings.timeout_s, settings.bootstrap_servers)
    read = _GroupRead(admin, admin if cluster is None else cluster, deadline)
    group = read.group(group_id)
    group_known, state = group.exists, group.state
    if group_known and not topics:
        topics = read.committed_topics(group_id)
    if not topics:
        if not group_known:
            raise UnknownGroupError(
                f"consumer group {group_id!r} does not exist on {settings.bootstrap_servers} "
                "and no topics were given"
            )
        raise LagSourceConfigError(f"group {group_id!r} has no committed offsets; name its topics")
    if not group_known and settings.require_group:
        raise UnknownGroupError(f"consumer group {group_id!r} does not exist on {settings.bootstrap_servers}")
    partitions, racks = read.describe_topics(sorted(set(topics)))
    missing = tuple(sorted(set(topics) - partitions.keys()))
    tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
    committed = read.committed(group_id, tps) if group_known else {}
    starts, ends = read.log_offsets(tps)
    offsets = {
        tp: PartitionOffsets(log_start=starts[tp], log_end=ends[tp], committed=committed.get(tp))
        for tp in tps
    }
    return GroupOffsets(
        group_id=group_id,
        group_known=group_known,
        group_state=state,
        taken_at=time.time(),
        partitions=partitions,
        partition_racks=racks,
        offsets=offsets,
        assignment=group,
        missing_topics=missing,
    )


class _GroupRead:
    """The round trips of one read, one method each, all within one deadline."""

    def __init__(self, admin: KafkaAdmin, cluster: ClusterRequests, deadline: Deadline) -> None:
        self.admin = admin
        self.cluster = cluster
        self.deadline = deadline

    def group(self, group_id: str) -> GroupAssignment:
        deadline = self.deadline

        def attempt() -> GroupAssignment:
            futures = self.cluster.describe_groups([group_id], deadline.remaining())
            try:
                description = self.admin.result(futures[group_id], deadline, f"group {group_id!r}")
            except LagError as e:
                # The new group coordinator answers GROUP_ID_NOT_FOUND where the classic one says Dead.
                cause = e.__cause__
                if isinstance(cause, KafkaException) and code_of(cause) == KafkaError.GROUP_ID_NOT_FOUND:
                    return GroupAssignment(group_id=group_id, state="Dead", members={})
                raise
            members = {
                str(member.group_instance_id or member.member_id): tuple(
                    sorted(
                        TopicPartition(ktp.topic, ktp.partition)
                        for ktp in (member.assignment.topic_partitions if member.assignment else [])
                    )
                )
                for member in description.members
            }
            # PREPARING_REBALANCE -> PreparingRebalance, as Kafka's own tools spell it
            state = getattr(description.state, "name", str(description.state))
            camel = "".join(word.title() for word in state.split("_"))
            return GroupAssignment(group_id=group_id, state=camel, members=members)

        return retrying(attempt, deadline, f"group {group_id!r}")

    def committed_topics(self, group_id: str) -> list[str]:
        deadline = self.deadline

        def attempt() -> list[str]:
            future = self.admin.group_offsets(group_id, None, deadline.remaining())
            answer = self.admin.result(future, deadline, f"offsets of group {group_id!r}")
            return sorted({tp.topic for tp in answer.topic_partitions if tp.offset >= 0})

        return retrying(attempt, deadline, f"offsets of group {group_id!r}")

    def describe_topics(self, topics: list[str]) -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
        deadline = self.deadline

        def attempt() -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
            futures = self.cluster.describe_topics(topics, deadline.remaining())
            partitions: dict[str, int] = {}
            racks: dict[str, list[frozenset[str]]] = {}
            missing: list[str] = []
            for topic in topics:
                try:
                    description = self.admin.result(futures[topic], deadline, f"topic {topic!r}")
                except UnknownTopicError:
                    missing.append(topic)
                    continue
                ordered = sorted(description.partitions, key=lambda info: info.id)
                partitions[topic] = len(ordered)
                racks[topic] = [frozenset(n.rack for n in info.replicas if n.rack) for info in ordered]
            if not partitions:
                names = ", ".join(repr(t) for t in missing)
                what = f"topic {names} does" if len(missing) == 1 else f"topics {names} do"
                raise UnknownTopicError(f"{what} not exist at {deadline.what}", tuple(missing))
            return partitions, racks

        return retrying(attempt, deadline, f"topics {', '.join(topics)}")

    def committed(self, group_id: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        deadline = self.deadline

        def attempt() -> dict[TopicPartition, int]:
            future = self.admin.group_offsets(group_id, tps, deadline.remaining())
            answer = self.admin.result(future, deadline, f"offsets of group {group_id!r}")
            committed: dict[TopicPartition, int] = {}
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise map_error(
                        KafkaException(tp.error), f"offset of {tp.topic}-{tp.partition}", deadline
                    )
                if tp.offset >= 0:  # OFFSET_INVALID (-1001): never committed
                    committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
            return committed

        return retrying(attempt, deadline, f"offsets of group {group_id!r}")

    def log_offsets(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Log start and log end of every partition, both asked at once."""
        deadline = self.deadline
        queries: list[OffsetQuery] = [("earliest", tp) for tp in tps] + [("latest", tp) for tp in tps]

        def attempt() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
            futures = self.cluster.list_offsets(queries, deadline.remaining())
            found = {
                (which, tp): int(
                    self.admin.result(
                        futures[(which, tp)], deadline, f"offsets of {tp.topic}-{tp.partition}"
                    ).offset
                )
                for which, tp in queries
            }
            return {tp: found[("earliest", tp)] for tp in tps}, {tp: found[("latest", tp)] for tp in tps}

        return retrying(attempt, deadline, "log offsets")
