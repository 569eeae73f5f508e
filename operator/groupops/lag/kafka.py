"""The `kafka` lag source: a group's lag read from the cluster itself through the Admin API
(confluent-kafka's AdminClient over librdkafka).

Who calls it: `groupops lag`, `groupops assign --lag-from-kafka`, the operator's lag step.

One `read` is up to five round trips, all bounded by one deadline (`timeout_s`, default 6 s, so
that a dead cluster is reported well within 10 s):
1. DescribeGroups: whether the group exists at all;
2. (no topics given) OffsetFetch for the whole group: the topics it committed on;
3. DescribeTopics: partitions of each topic and the racks of their replicas;
4. OffsetFetch: the group's committed offsets (skipped for an unknown group);
5. ListOffsets, twice: log start (earliest) and log end (latest) of every partition.
A transient answer (coordinator moving or loading, leader election) is retried with backoff
inside the deadline. Lag per partition is then `lag_from_offsets` (docs/design.md §4: end − committed;
no commit: `latest` → 0, anything else → end − start).

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

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

# Where OffsetSpec is defined: confluent_kafka.admin exposes it without listing it in __all__.
from confluent_kafka.admin._listoffsets import OffsetSpec

from groupops.lag.base import (
    GroupAssignment,
    LagAuthorizationError,
    LagError,
    LagSnapshot,
    LagSourceConfigError,
    LagSourceUnavailable,
    PartitionOffsets,
    UnknownTopicError,
    lag_from_offsets,
)
from groupops.model import TopicPartition

if TYPE_CHECKING:
    from groupops.lag.history import OffsetHistory
    from groupops.lag.registry import SourceContext

__all__ = [
    "AUTO_OFFSET_RESET_VALUES",
    "GroupAssignment",
    "GroupOffsets",
    "KafkaLagSettings",
    "KafkaLagSource",
    "UnknownGroupError",
    "from_spec",
    "normalize_auto_offset_reset",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# librdkafka's spellings of auto.offset.reset; the lag rule only distinguishes `latest`.
_LATEST_ALIASES = frozenset({"latest", "largest", "end"})
AUTO_OFFSET_RESET_VALUES = ("earliest", "latest", "smallest", "largest", "beginning", "end", "error", "none")

_TIMED_OUT = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
    }
)
# Answers a broker gives while a coordinator or leader moves or loads: worth another try.
_TRANSIENT = frozenset(
    {
        KafkaError._WAIT_COORD,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)
_DENIED = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
_UNKNOWN_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


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
        )


_SPEC_KEYS = {"timeoutSeconds": float, "requireGroup": bool}


def from_spec(spec: Mapping[str, Any], context: SourceContext) -> KafkaLagSource:
    """The registry's constructor (groupops.lag.registry): the connection comes from the
    policy's `kafka` block via `context`; `spec` (`lagSource.kafka`, may be empty) may set
    `timeoutSeconds` and `requireGroup`."""
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
    settings = KafkaLagSettings(
        bootstrap_servers=context.bootstrap_servers,
        auto_offset_reset=context.auto_offset_reset,
        timeout_s=float(spec.get("timeoutSeconds", context.timeout_seconds)),
        require_group=bool(spec.get("requireGroup", False)),
        client_config=dict(context.client_config),
    )
    return KafkaLagSource(settings, history=context.history)


class _Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self._end = time.monotonic() + seconds

    def remaining_or_zero(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def remaining(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise LagSourceUnavailable(f"no answer from Kafka at {self.what} within {self.seconds:g} s")
        return left


class KafkaLagSource:
    """The `kafka` LagSource. Holds one AdminClient; call close() (or use `with`) when done."""

    def __init__(self, settings: KafkaLagSettings, *, history: OffsetHistory | None = None) -> None:
        self.settings = settings
        self._history = history
        config: dict[str, Any] = {
            **settings.client_config,
            "bootstrap.servers": settings.bootstrap_servers,
            # librdkafka logs to our logger, not to stderr, and only when polled.
            "logger": log,
            # A refused SASL login never fails the pending requests (they just time out); the
            # client reports it here, and `_result` turns it into LagAuthorizationError at once.
            "error_cb": self._on_client_error,
        }
        self._login_refused: KafkaError | None = None
        try:
            self._admin = AdminClient(config)
        except (KafkaException, ValueError, TypeError) as e:
            raise LagSourceConfigError(f"invalid Kafka client config: {_describe(e)}") from e

    def _on_client_error(self, error: KafkaError) -> None:
        if error.code() in {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}:
            self._login_refused = error
        else:
            log.debug("kafka client: %s", error.str())

    def _result(self, future: concurrent.futures.Future[Any], deadline: _Deadline, what: str) -> Any:
        """Wait for one answer, serving the client's callbacks meanwhile (logs, login errors).
        The client's own request_timeout normally fires first; the extra second only guards a
        future that is never completed."""
        end = time.monotonic() + deadline.remaining_or_zero() + 1.0
        while not future.done():
            self._admin.poll(0.05)
            if self._login_refused is not None:
                raise LagAuthorizationError(
                    f"Kafka at {deadline.what} refused the login: {self._login_refused.str()}"
                )
            if time.monotonic() > end:
                raise LagSourceUnavailable(
                    f"no answer from Kafka at {deadline.what} within {deadline.seconds:g} s ({what})"
                )
        try:
            return future.result(timeout=0)
        except KafkaException as e:
            raise _map_error(e, what, deadline) from e

    def __enter__(self) -> KafkaLagSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to flush: the AdminClient holds no pending writes (kept for the Protocol)."""

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        """Lag of `group_id` on `topics` (all topics the group committed on, when empty); the
        offsets read are appended to the offset history when the source has one."""
        offsets = self.read_group(group_id, topics)
        if self._history is not None:
            self._history.record(
                offsets, bootstrap=self.settings.bootstrap_servers, client_config=self.settings.client_config
            )
        return offsets.snapshot(self.settings.auto_offset_reset)

    def partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        """Each topic's partition count from the cluster's metadata (UnknownTopicError for a
        topic that does not exist): what the operator plans by when the lag source is down."""
        deadline = _Deadline(self.settings.timeout_s, self.settings.bootstrap_servers)
        counts, _ = self._describe_topics(list(topics), deadline)
        return counts

    def read_group(self, group_id: str, topics: Sequence[str]) -> GroupOffsets:
        """The raw offsets behind `read`, plus whether the group exists and replica racks."""
        if not group_id:
            raise LagSourceConfigError("group id is empty")
        self._login_refused = None  # judge each read by its own logins
        deadline = _Deadline(self.settings.timeout_s, self.settings.bootstrap_servers)
        group = self._group(group_id, deadline)
        group_known, state = group.exists, group.state
        if group_known and not topics:
            topics = self._committed_topics(group_id, deadline)
        if not topics:
            if not group_known:
                raise UnknownGroupError(
                    f"consumer group {group_id!r} does not exist on {self.settings.bootstrap_servers} "
                    "and no topics were given"
                )
            raise LagSourceConfigError(f"group {group_id!r} has no committed offsets; name its topics")
        if not group_known and self.settings.require_group:
            raise UnknownGroupError(
                f"consumer group {group_id!r} does not exist on {self.settings.bootstrap_servers}"
            )
        partitions, racks = self._describe_topics(sorted(set(topics)), deadline)
        tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
        committed = self._committed(group_id, tps, deadline) if group_known else {}
        starts = self._list_offsets(tps, _offset_spec("earliest"), deadline)
        ends = self._list_offsets(tps, _offset_spec("latest"), deadline)
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
        )

    def assignment(self, group_id: str) -> GroupAssignment:
        """The broker's actual assignment of `group_id` (an unknown group has no members)."""
        self._login_refused = None
        return self._group(group_id, _Deadline(self.settings.timeout_s, self.settings.bootstrap_servers))

    # -- one method per round trip ---------------------------------------------------------

    def _group(self, group_id: str, deadline: _Deadline) -> GroupAssignment:
        def attempt() -> GroupAssignment:
            futures = self._admin.describe_consumer_groups([group_id], request_timeout=deadline.remaining())
            try:
                description = self._result(futures[group_id], deadline, f"group {group_id!r}")
            except LagError as e:
                # The new group coordinator answers GROUP_ID_NOT_FOUND where the classic one says Dead.
                cause = e.__cause__
                if isinstance(cause, KafkaException) and _code(cause) == KafkaError.GROUP_ID_NOT_FOUND:
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

        return _retrying(attempt, deadline, f"group {group_id!r}")

    def _committed_topics(self, group_id: str, deadline: _Deadline) -> list[str]:
        request = [ConsumerGroupTopicPartitions(group_id)]

        def attempt() -> list[str]:
            futures = self._admin.list_consumer_group_offsets(request, request_timeout=deadline.remaining())
            answer = self._result(futures[group_id], deadline, f"offsets of group {group_id!r}")
            return sorted({tp.topic for tp in answer.topic_partitions if tp.offset >= 0})

        return _retrying(attempt, deadline, f"offsets of group {group_id!r}")

    def _describe_topics(
        self, topics: list[str], deadline: _Deadline
    ) -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
        def attempt() -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
            futures = self._admin.describe_topics(
                TopicCollection(topics), request_timeout=deadline.remaining()
            )
            partitions: dict[str, int] = {}
            racks: dict[str, list[frozenset[str]]] = {}
            for topic in topics:
                description = self._result(futures[topic], deadline, f"topic {topic!r}")
                ordered = sorted(description.partitions, key=lambda info: info.id)
                partitions[topic] = len(ordered)
                racks[topic] = [frozenset(n.rack for n in info.replicas if n.rack) for info in ordered]
            return partitions, racks

        return _retrying(attempt, deadline, f"topics {', '.join(topics)}")

    def _committed(
        self, group_id: str, tps: list[TopicPartition], deadline: _Deadline
    ) -> dict[TopicPartition, int]:
        request = [ConsumerGroupTopicPartitions(group_id, [KafkaTopicPartition(t, p) for t, p in tps])]

        def attempt() -> dict[TopicPartition, int]:
            futures = self._admin.list_consumer_group_offsets(request, request_timeout=deadline.remaining())
            answer = self._result(futures[group_id], deadline, f"offsets of group {group_id!r}")
            committed: dict[TopicPartition, int] = {}
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise _map_error(
                        KafkaException(tp.error), f"offset of {tp.topic}-{tp.partition}", deadline
                    )
                if tp.offset >= 0:  # OFFSET_INVALID (-1001): never committed
                    committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
            return committed

        return _retrying(attempt, deadline, f"offsets of group {group_id!r}")

    def _list_offsets(
        self, tps: list[TopicPartition], spec: OffsetSpec, deadline: _Deadline
    ) -> dict[TopicPartition, int]:
        request = {KafkaTopicPartition(t, p): spec for t, p in tps}

        def attempt() -> dict[TopicPartition, int]:
            futures = self._admin.list_offsets(request, request_timeout=deadline.remaining())
            return {
                TopicPartition(ktp.topic, ktp.partition): int(
                    self._result(future, deadline, f"offsets of {ktp.topic}-{ktp.partition}").offset
                )
                for ktp, future in futures.items()
            }

        return _retrying(attempt, deadline, "log offsets")


class _Retriable(LagSourceUnavailable):
    """A transient broker answer (coordinator moving or loading, leader election): retried
    within the deadline."""


def _retrying(attempt: Callable[[], _T], deadline: _Deadline, what: str) -> _T:
    """Run one round trip; on a transient answer retry with backoff (0.1 s doubling to 1 s),
    logging each attempt, until it succeeds or the deadline passes."""
    backoff = 0.1
    number = 1
    while True:
        try:
            return attempt()
        except _Retriable as e:
            left = deadline.remaining_or_zero()
            if left <= backoff:
                raise LagSourceUnavailable(
                    f"Kafka at {deadline.what} kept answering a transient error for {what} "
                    f"for {deadline.seconds:g} s ({number} attempts): {e}"
                ) from e
            log.debug("attempt %d for %s: %s; retrying in %.1f s", number, what, e, backoff)
            time.sleep(backoff)
            backoff = min(1.0, backoff * 2)
            number += 1
        except KafkaException as e:  # raised by the call itself (e.g. an invalid argument)
            raise _map_error(e, what, deadline) from e


def _offset_spec(which: str) -> OffsetSpec:
    # OffsetSpec's factory methods carry no annotations.
    spec: OffsetSpec = getattr(OffsetSpec, which)()
    return spec


def _code(error: KafkaException) -> int | None:
    first = error.args[0] if error.args else None
    return first.code() if isinstance(first, KafkaError) else None


def _describe(error: BaseException) -> str:
    first = error.args[0] if error.args else error
    return first.str() if isinstance(first, KafkaError) else str(first)


def _map_error(error: KafkaException, what: str, deadline: _Deadline | None = None) -> LagError:
    """One librdkafka error → our tree, with a message naming what failed and where."""
    code = _code(error)
    where = f" at {deadline.what}" if deadline is not None else ""
    detail = _describe(error)
    if code in _UNKNOWN_TOPIC:
        return UnknownTopicError(f"{what} does not exist{where}")
    if code in _DENIED:
        return LagAuthorizationError(f"Kafka{where} refused access to {what}: {detail}")
    if code in _TRANSIENT:
        return _Retriable(f"{detail} ({what})")
    if code in _TIMED_OUT:
        bound = f" within {deadline.seconds:g} s" if deadline is not None else ""
        return LagSourceUnavailable(f"no answer from Kafka{where}{bound} for {what}: {detail}")
    if code in {KafkaError._INVALID_ARG, KafkaError.INVALID_GROUP_ID, KafkaError.INVALID_CONFIG}:
        return LagSourceConfigError(f"invalid request for {what}: {detail}")
    return LagError(f"Kafka{where} failed on {what}: {detail}")
