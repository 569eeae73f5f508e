"""One connection to a Kafka cluster for lag reads: a confluent-kafka AdminClient, the Admin API
calls the `kafka` lag source makes, and librdkafka's errors mapped onto our tree.

Who calls it: `groupops.lag.kafka` (each `KafkaLagSource` holds one `KafkaAdmin`) and
`groupops.controller.lagfleet` (the operator holds one `KafkaAdmin` per connection and batches the
calls below across every policy on it).

The calls a read makes split in two (docs/design.md §8.4):
- *per cluster*, `ClusterRequests`: DescribeGroups, DescribeTopics and ListOffsets take many
  groups, topics or partitions in one request, so a fleet reader may answer many policies with
  one call; `KafkaAdmin` itself answers each call with its own request;
- *per group*: OffsetFetch (`KafkaAdmin.group_offsets`), which the Admin API takes for one group
  per request.

Every answer is a `concurrent.futures.Future` per key, as confluent-kafka gives them, so the
read's code (groupops.lag.kafka) is the same whichever answers it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

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
    LagAuthorizationError,
    LagError,
    LagSourceConfigError,
    LagSourceUnavailable,
    UnknownTopicError,
)
from groupops.model import TopicPartition

__all__ = [
    "ClusterRequests",
    "Deadline",
    "KafkaAdmin",
    "OffsetQuery",
    "Retriable",
    "code_of",
    "map_error",
    "retrying",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

OffsetKind = Literal["earliest", "latest"]
OffsetQuery = tuple[OffsetKind, TopicPartition]
"""One ListOffsets question: the log start (`earliest`) or log end (`latest`) of a partition."""
_OFFSET_KINDS: tuple[OffsetKind, ...] = ("earliest", "latest")

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
_LOGIN_REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class ClusterRequests(Protocol):
    """The Admin API calls that take many keys in one request. Each returns one future per key
    it was asked, completed with confluent-kafka's answer or its KafkaException."""

    def describe_groups(
        self, group_ids: Sequence[str], timeout_s: float
    ) -> Mapping[str, concurrent.futures.Future[Any]]: ...

    def describe_topics(
        self, topics: Sequence[str], timeout_s: float
    ) -> Mapping[str, concurrent.futures.Future[Any]]: ...

    def list_offsets(
        self, queries: Sequence[OffsetQuery], timeout_s: float
    ) -> Mapping[OffsetQuery, concurrent.futures.Future[Any]]: ...


_CALLBACKS_EVERY_S = 0.05
"""While it waits for an answer, a read serves the client's callbacks this often."""


class Deadline:
    """The time budget of one read, and where it reads from (`what`, for messages)."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.started = time.monotonic()
        self._end = self.started + seconds

    def remaining_or_zero(self) -> float:
        return max(0.0, self._end - time.monotonic())

    def remaining(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise LagSourceUnavailable(f"no answer from Kafka at {self.what} within {self.seconds:g} s")
        return left


class KafkaAdmin:
    """One AdminClient on one connection (`bootstrap_servers` + librdkafka `client_config`).

    Safe to share between threads: confluent-kafka completes the futures from librdkafka's own
    thread, and every waiter serves the client's callbacks (logs, login errors) while it waits.
    `close` drops the client; librdkafka ends its threads and connections when it is collected.
    `on_request` is told the name of every Admin API call made (DescribeGroups, DescribeTopics,
    OffsetFetch, ListOffsets), for metrics.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        client_config: Mapping[str, str],
        *,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._on_request = on_request or (lambda _request: None)
        config: dict[str, Any] = {
            **client_config,
            "bootstrap.servers": bootstrap_servers,
            # librdkafka logs to our logger, not to stderr, and only when polled.
            "logger": log,
            # A refused SASL login never fails the pending requests (they just time out); the
            # client reports it here, and `result` turns it into LagAuthorizationError at once.
            "error_cb": self._on_client_error,
        }
        self._lock = threading.Lock()
        self._login_refused: tuple[float, KafkaError] | None = None
        try:
            self._admin: AdminClient | None = AdminClient(config)
        except (KafkaException, ValueError, TypeError) as e:
            raise LagSourceConfigError(f"invalid Kafka client config: {describe_error(e)}") from e

    @property
    def login_refused(self) -> bool:
        """Whether the brokers ever refused this client's login (its credentials are wrong)."""
        return self._login_refused is not None

    def _on_client_error(self, error: KafkaError) -> None:
        if error.code() in _LOGIN_REFUSED:
            with self._lock:
                self._login_refused = (time.monotonic(), error)
        else:
            log.debug("kafka client: %s", error.str())

    def _client(self) -> AdminClient:
        admin = self._admin
        if admin is None:
            raise LagSourceUnavailable(f"the Kafka client for {self.bootstrap_servers} was closed")
        return admin

    def close(self) -> None:
        """Drop the client (it holds no pending writes); later calls raise LagSourceUnavailable.
        Dropping it also breaks the cycle client -> error_cb -> self, so it is freed at once."""
        self._admin = None

    def result(self, future: concurrent.futures.Future[Any], deadline: Deadline, what: str) -> Any:
        """Wait for one answer, serving the client's callbacks meanwhile (logs, login errors).
        A login refused since this read began fails it at once: the same credentials would be
        refused again. The client's own request_timeout normally fires first; the extra second
        only guards a future that is never completed."""
        end = time.monotonic() + deadline.remaining_or_zero() + 1.0
        while not future.done():
            # librdkafka's background thread completes the future; poll only serves callbacks,
            # and waiting in poll would add up to its timeout to every answer
            concurrent.futures.wait((future,), timeout=_CALLBACKS_EVERY_S)
            self._client().poll(0)
            refused = self._login_refused
            if refused is not None and refused[0] >= deadline.started:
                raise LagAuthorizationError(f"Kafka at {deadline.what} refused the login: {refused[1].str()}")
            if time.monotonic() > end:
                raise LagSourceUnavailable(
                    f"no answer from Kafka at {deadline.what} within {deadline.seconds:g} s ({what})"
                )
        try:
            return future.result(timeout=0)
        except KafkaException as e:
            raise map_error(e, what, deadline) from e

    # -- ClusterRequests, one request per call ---------------------------------------------------

    def describe_groups(
        self, group_ids: Sequence[str], timeout_s: float
    ) -> Mapping[str, concurrent.futures.Future[Any]]:
        futures: Mapping[str, concurrent.futures.Future[Any]] = self._client().describe_consumer_groups(
            list(group_ids), request_timeout=timeout_s
        )
        self._on_request("DescribeGroups")
        return futures

    def describe_topics(
        self, topics: Sequence[str], timeout_s: float
    ) -> Mapping[str, concurrent.futures.Future[Any]]:
        futures: Mapping[str, concurrent.futures.Future[Any]] = self._client().describe_topics(
            TopicCollection(list(topics)), request_timeout=timeout_s
        )
        self._on_request("DescribeTopics")
        return futures

    def list_offsets(
        self, queries: Sequence[OffsetQuery], timeout_s: float
    ) -> dict[OffsetQuery, concurrent.futures.Future[Any]]:
        """One ListOffsets call per kind of offset asked (a partition takes one timestamp per
        request, so the log start and the log end of a partition are two requests)."""
        answers: dict[OffsetQuery, concurrent.futures.Future[Any]] = {}
        for which in _OFFSET_KINDS:
            request = {
                KafkaTopicPartition(tp.topic, tp.partition): _offset_spec(which)
                for w, tp in queries
                if w == which
            }
            if not request:
                continue
            futures = self._client().list_offsets(request, request_timeout=timeout_s)
            self._on_request("ListOffsets")
            for ktp, future in futures.items():
                answers[(which, TopicPartition(ktp.topic, ktp.partition))] = future
        return answers

    def offsets_at(
        self, partitions: Sequence[TopicPartition], at_ms: int, timeout_s: float
    ) -> dict[TopicPartition, concurrent.futures.Future[Any]]:
        """ListOffsets by time: per partition the first offset whose timestamp is at or after
        `at_ms` (-1 in the answer when no message is that recent)."""
        request = {
            KafkaTopicPartition(tp.topic, tp.partition): OffsetSpec.for_timestamp(at_ms) for tp in partitions
        }
        futures = self._client().list_offsets(request, request_timeout=timeout_s)
        self._on_request("ListOffsets")
        return {TopicPartition(ktp.topic, ktp.partition): future for ktp, future in futures.items()}

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], timeout_s: float
    ) -> concurrent.futures.Future[Any]:
        """OffsetCommit for the group from outside it (what `kafka-consumer-groups
        --reset-offsets --execute` sends); Kafka refuses it while the group has members."""
        request = ConsumerGroupTopicPartitions(
            group_id,
            [KafkaTopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())],
        )
        futures = self._client().alter_consumer_group_offsets([request], request_timeout=timeout_s)
        self._on_request("OffsetCommit")
        future: concurrent.futures.Future[Any] = futures[group_id]
        return future

    # -- per group -------------------------------------------------------------------------------

    def group_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None, timeout_s: float
    ) -> concurrent.futures.Future[Any]:
        """OffsetFetch of one group: for `partitions`, or for every partition it committed on
        (None)."""
        wanted = None if partitions is None else [KafkaTopicPartition(t, p) for t, p in partitions]
        request = [ConsumerGroupTopicPartitions(group_id, wanted)]
        futures = self._client().list_consumer_group_offsets(request, request_timeout=timeout_s)
        self._on_request("OffsetFetch")
        future: concurrent.futures.Future[Any] = futures[group_id]
        return future


class Retriable(LagSourceUnavailable):
    """A transient broker answer (coordinator moving or loading, leader election): retried
    within the deadline."""


def retrying(attempt: Callable[[], _T], deadline: Deadline, what: str) -> _T:
    """Run one round trip; on a transient answer retry with backoff (0.1 s doubling to 1 s),
    logging each attempt, until it succeeds or the deadline passes."""
    backoff = 0.1
    number = 1
    while True:
        try:
            return attempt()
        except Retriable as e:
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
            raise map_error(e, what, deadline) from e


def _offset_spec(which: str) -> OffsetSpec:
    # OffsetSpec's factory methods carry no annotations.
    spec: OffsetSpec = getattr(OffsetSpec, which)()
    return spec


def code_of(error: KafkaException) -> int | None:
    first = error.args[0] if error.args else None
    return first.code() if isinstance(first, KafkaError) else None


def describe_error(error: BaseException) -> str:
    first = error.args[0] if error.args else error
    return first.str() if isinstance(first, KafkaError) else str(first)


def map_error(error: KafkaException, what: str, deadline: Deadline | None = None) -> LagError:
    """One librdkafka error → our tree, with a message naming what failed and where."""
    code = code_of(error)
    where = f" at {deadline.what}" if deadline is not None else ""
    detail = describe_error(error)
    if code in _UNKNOWN_TOPIC:
        return UnknownTopicError(f"{what} does not exist{where}")
    if code in _DENIED:
        return LagAuthorizationError(f"Kafka{where} refused access to {what}: {detail}")
    if code in _TRANSIENT:
        return Retriable(f"{detail} ({what})")
    if code in _TIMED_OUT:
        bound = f" within {deadline.seconds:g} s" if deadline is not None else ""
        return LagSourceUnavailable(f"no answer from Kafka{where}{bound} for {what}: {detail}")
    if code in {KafkaError._INVALID_ARG, KafkaError.INVALID_GROUP_ID, KafkaError.INVALID_CONFIG}:
        return LagSourceConfigError(f"invalid request for {what}: {detail}")
    return LagError(f"Kafka{where} failed on {what}: {detail}")
