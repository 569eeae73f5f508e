"""The operator's `kafka` lag reads, one reader per Kafka connection: one long-lived AdminClient
per cluster and credentials, and the per-cluster requests of every policy read within one round
batched into one call.

Who calls it: `reconcile`'s lag step (`_read_lag`), on the lag pool, for every policy whose
`lagSource.type` is `kafka`, and for the partition counts of the `prometheus` and `burrow`
sources (`partition_counts`, through `controller.lagaccess`); `controller.main` creates the
readers and closes them on shutdown.

What a policy's read returns is exactly `KafkaLagSource.read`'s: both run
`groupops.lag.kafka.read_group_offsets`; only who answers the per-cluster requests differs
(docs/design.md §8.4):

- *Keyed by connection.* A reader serves the policies whose bootstrap servers and librdkafka
  properties are the same (`connection_key`); consumer-only properties, which librdkafka ignores
  on an admin client, are left out of the key and off the client, but their values are still
  checked by librdkafka, once per distinct set. Two policies whose credentials, TLS or any other
  property differ never share a client.
- *Rounds.* DescribeGroups, DescribeTopics and ListOffsets questions that arrive within
  `window_s` (50 ms) of a round's first one are asked in one call: ListOffsets is one call for the
  log starts and one for the log ends of every partition of every policy in the round, whatever
  the number of policies. OffsetFetch stays one request per group (the Admin API takes one group).
- *Metadata.* A topic's description (partition count, replica racks) is reused for
  `metadata_ttl_s` (5 s), so a partition added to a topic shows within that time.
- *Lifetime.* A reader unused for `idle_s` (5 min) is closed, and all are closed by `close`. A
  reader whose login the brokers refused is dropped at once: the next read starts a new client,
  as every read did before, so the refusal is reported again, not a timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from groupops.controller.metrics import Metrics
from groupops.lag import (
    LagAuthorizationError,
    LagError,
    LagSnapshot,
    LagSource,
    LagSourceConfigError,
    LagSourceUnavailable,
)
from groupops.lag.kafka import (
    KafkaLagSettings,
    lag_snapshot,
    read_group_offsets,
    read_partition_counts,
    settings_from_spec,
)
from groupops.lag.kafka_admin import KafkaAdmin, OffsetQuery, describe_error
from groupops.lag.registry import SourceContext

if TYPE_CHECKING:
    from groupops.lag.history import HistorySink

__all__ = [
    "CONSUMER_ONLY_PROPERTIES",
    "ClusterLagReader",
    "ConnectionKey",
    "KafkaClusterReaders",
    "Rounds",
    "connection_key",
]

log = logging.getLogger(__name__)

_K = TypeVar("_K")

CONSUMER_ONLY_PROPERTIES = frozenset(
    {
        "auto.commit.interval.ms",
        "auto.offset.reset",
        "check.crcs",
        "coordinator.query.interval.ms",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "fetch.error.backoff.ms",
        "fetch.max.bytes",
        "fetch.message.max.bytes",
        "fetch.min.bytes",
        "fetch.wait.max.ms",
        "group.id",
        "group.instance.id",
        "group.protocol",
        "heartbeat.interval.ms",
        "isolation.level",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "queued.max.messages.kbytes",
        "queued.min.messages",
        "session.timeout.ms",
    }
)
"""librdkafka properties that an admin client ignores ("is a consumer property and will be
ignored by this producer instance"): policies often differ in them (`max.poll.interval.ms` follows
`spec.consumers`), and they do not change the connection."""

_MIN_REQUEST_TIMEOUT_S = 0.1
"""The request timeout of a round sent when its askers' deadlines have all passed (its opener
woke late): librdkafka needs a positive one, and each asker gives up on its own deadline anyway."""


@dataclass(frozen=True, slots=True)
class ConnectionKey:
    """What identifies a connection: the bootstrap servers (as a set) and every librdkafka
    property that is not consumer-only, sorted. Holds credentials: never log it."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:
        return f"ConnectionKey({self.bootstrap_servers!r}, <{len(self.properties)} properties>)"


def connection_key(settings: KafkaLagSettings) -> tuple[ConnectionKey, frozenset[tuple[str, str]]]:
    """The connection of a policy's reads, and the consumer-only properties left out of it."""
    servers = sorted({server.strip() for server in settings.bootstrap_servers.split(",") if server.strip()})
    kept = tuple(
        sorted((k, v) for k, v in settings.client_config.items() if k not in CONSUMER_ONLY_PROPERTIES)
    )
    left_out = frozenset((k, v) for k, v in settings.client_config.items() if k in CONSUMER_ONLY_PROPERTIES)
    return ConnectionKey(",".join(servers), kept), left_out


@dataclass(slots=True)
class _Round(Generic[_K]):
    opened_at: float
    answers_by: float
    keys: dict[_K, None] = field(default_factory=dict)
    """The keys asked, in the order first asked (a dict as an ordered set)."""
    sent: threading.Event = field(default_factory=threading.Event)
    answers: Mapping[_K, Future[Any]] = field(default_factory=dict)
    """The call's future per key, once `sent` is set."""


class Rounds(Generic[_K]):
    """Questions asked within `window_s` of each other, sent as one call.

    `ask(keys, timeout_s)` joins the open round (or opens one) and returns, once the round is
    sent, the call's own future for each of its keys; the same key asked twice in a round shares
    one future. The thread that opened a round waits out the window, closes the round and sends
    it with `send(keys, timeout_s)`, whose timeout is the latest of the askers' deadlines; the
    others wait for that (at most the window: the call only sends). An exception from `send`
    itself fails every question of the round.

    Why no future of our own per key: a round of a busy fleet asks thousands of partitions, and
    a `Future` (a condition and a lock each) per key, plus a callback copying each answer, were
    a tenth of the operator's main process on a busy fleet (docs/design.md §8.4).
    """

    def __init__(
        self,
        send: Callable[[list[_K], float], Mapping[_K, Future[Any]]],
        *,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._send = send
        self._window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._open: _Round[_K] | None = None

    def ask(self, keys: Sequence[_K], timeout_s: float) -> dict[_K, Future[Any]]:
        with self._lock:
            now = self._clock()
            opened = self._open
            if opened is None:
                opened = self._open = _Round(opened_at=now, answers_by=now)
                opener = True
            else:
                opener = False
            opened.answers_by = max(opened.answers_by, now + timeout_s)
            opened.keys.update(dict.fromkeys(keys))
        if opener:
            try:
                self._sleep(max(0.0, opened.opened_at + self._window_s - self._clock()))
            finally:
                with self._lock:
                    self._open = None
                self._dispatch(opened)
        else:
            opened.sent.wait()
        answers = opened.answers
        return {
            key: answers[key] if key in answers else _failed(LagError("the round's call was never made"))
            for key in keys
        }

    def _dispatch(self, closed: _Round[_K]) -> None:
        try:
            timeout_s = max(_MIN_REQUEST_TIMEOUT_S, closed.answers_by - self._clock())
            try:
                answers = dict(self._send(list(closed.keys), timeout_s))
            except Exception as e:  # KafkaException (bad request), or the client was closed
                answers = {key: _failed(e) for key in closed.keys}
            for key in closed.keys:
                if key not in answers:
                    answers[key] = _failed(LagError(f"Kafka's answer left out {key!r}"))
            closed.answers = answers
        finally:
            closed.sent.set()


def _failed(error: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(error)
    return future


class ClusterLagReader:
    """The reads of every policy on one connection: one `KafkaAdmin`, its rounds, its metadata.
    It is the `ClusterRequests` of `read_group_offsets` for those policies."""

    def __init__(
        self,
        admin: KafkaAdmin,
        *,
        window_s: float,
        metadata_ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.admin = admin
        self._metadata_ttl_s = metadata_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[float, Future[Any]]] = {}
        self._group_rounds = Rounds[str](admin.describe_groups, window_s=window_s, clock=clock, sleep=sleep)
        self._topic_rounds = Rounds[str](admin.describe_topics, window_s=window_s, clock=clock, sleep=sleep)
        self._offset_rounds = Rounds[OffsetQuery](
            admin.list_offsets, window_s=window_s, clock=clock, sleep=sleep
        )

    def read(
        self,
        settings: KafkaLagSettings,
        group_id: str,
        topics: Sequence[str],
        *,
        history: HistorySink | None,
    ) -> LagSnapshot:
        offsets = read_group_offsets(settings, group_id, topics, admin=self.admin, cluster=self)
        return lag_snapshot(offsets, settings, history=history)

    def partition_counts(self, settings: KafkaLagSettings, topics: Sequence[str]) -> dict[str, int]:
        """Each existing topic's partition count, from the cached descriptions or a round."""
        return read_partition_counts(settings, topics, admin=self.admin, cluster=self)

    def close(self) -> None:
        self.admin.close()

    # -- ClusterRequests -------------------------------------------------------------------------

    def describe_groups(self, group_ids: Sequence[str], timeout_s: float) -> Mapping[str, Future[Any]]:
        return self._group_rounds.ask(group_ids, timeout_s)

    def describe_topics(self, topics: Sequence[str], timeout_s: float) -> Mapping[str, Future[Any]]:
        """Fresh descriptions from the cache, the others asked in a round (and cached once they
        answer; a failure is never cached)."""
        now = self._clock()
        answers: dict[str, Future[Any]] = {}
        with self._lock:
            for topic in topics:
                cached = self._topics.get(topic)
                if cached is not None and now - cached[0] < self._metadata_ttl_s:
                    answers[topic] = cached[1]
        missing = [topic for topic in topics if topic not in answers]
        if missing:
            for topic, future in self._topic_rounds.ask(missing, timeout_s).items():
                future.add_done_callback(partial(self._remember_topic, topic))
                answers[topic] = future
        return {topic: answers[topic] for topic in topics}

    def _remember_topic(self, topic: str, future: Future[Any]) -> None:
        if future.exception() is None:
            with self._lock:
                self._topics[topic] = (self._clock(), future)

    def list_offsets(
        self, queries: Sequence[OffsetQuery], timeout_s: float
    ) -> Mapping[OffsetQuery, Future[Any]]:
        return self._offset_rounds.ask(queries, timeout_s)


@dataclass(slots=True, kw_only=True)
class _Entry:
    reader: ClusterLagReader
    users: int = 0
    idle_since: float
    retired: bool = False


class KafkaClusterReaders:
    """Every `ClusterLagReader` of the operator, by `ConnectionKey`; created when a policy first
    reads through its connection.

    window_s: how long a round collects questions (50 ms: far below the 1 s a reconcile waits for
        its lag, and enough for the lag pool's reads of one tick to meet).
    idle_s: a reader nobody read through for this long is closed (5 min: several reconcile
        ticks, so a steady fleet never reconnects).
    metadata_ttl_s: how long a topic's description is reused (5 s).
    connect: builds a connection (tests give a fake); the default is `KafkaAdmin`.
    """

    def __init__(
        self,
        metrics: Metrics | None = None,
        *,
        window_s: float = 0.05,
        idle_s: float = 300.0,
        metadata_ttl_s: float = 5.0,
        connect: Callable[[ConnectionKey, Callable[[str], None]], KafkaAdmin] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metrics = metrics
        self._window_s = window_s
        self._idle_s = idle_s
        self._metadata_ttl_s = metadata_ttl_s
        self._connect = connect or _connect
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[ConnectionKey, _Entry] = {}
        self._checked: set[frozenset[tuple[str, str]]] = {frozenset()}
        self._closed = False
        self._stop_sweeping = threading.Event()
        self._sweeper: threading.Thread | None = None

    @property
    def connections(self) -> int:
        """Readers open now (one AdminClient each)."""
        with self._lock:
            return len(self._entries)

    def source(self, spec: Mapping[str, Any], context: SourceContext) -> LagSource:
        """A policy's `kafka` lag source (the registry's `from_spec` rules) reading through the
        reader of its connection."""
        return _PolicySource(self, settings_from_spec(spec, context), context.history)

    def read(
        self,
        settings: KafkaLagSettings,
        group_id: str,
        topics: Sequence[str],
        *,
        history: HistorySink | None = None,
    ) -> LagSnapshot:
        """`KafkaLagSource(settings, history=history).read(group_id, topics)`, through the reader
        of the settings' connection."""
        with self.reader(settings) as reader:
            return reader.read(settings, group_id, topics, history=history)

    def partition_counts(self, settings: KafkaLagSettings, topics: Sequence[str]) -> dict[str, int]:
        """`KafkaLagSource(settings).partition_counts(topics)` through the reader of the
        settings' connection: what the HTTP lag sources count partitions by
        (`SourceContext.partition_counts`, given by `controller.lagaccess`)."""
        with self.reader(settings) as reader:
            return reader.partition_counts(settings, topics)

    @contextmanager
    def reader(self, settings: KafkaLagSettings) -> Iterator[ClusterLagReader]:
        """The reader of the settings' connection (made on first use), kept open while borrowed.
        A login refused while borrowed drops it: the next read makes a new client."""
        key, left_out = connection_key(settings)
        self._check_consumer_properties(left_out)
        entry = self._acquire(key)
        try:
            yield entry.reader
        except LagAuthorizationError:
            if entry.reader.admin.login_refused:
                self._retire(key, entry)
            raise
        finally:
            self._release(entry)

    def close_idle(self) -> int:
        """Close the readers nobody has read through for `idle_s`; how many were closed."""
        now = self._clock()
        with self._lock:
            idle = [
                key
                for key, entry in self._entries.items()
                if entry.users == 0 and now - entry.idle_since >= self._idle_s
            ]
            closing = [self._entries.pop(key) for key in idle]
        for entry in closing:
            entry.reader.close()
        if closing:
            log.info("closed %d idle Kafka lag reader(s); %d open", len(closing), self.connections)
        return len(closing)

    def close(self) -> None:
        """Close every reader (reads still running fail as unavailable) and stop sweeping."""
        with self._lock:
            self._closed = True
            closing, self._entries = list(self._entries.values()), {}
        self._stop_sweeping.set()
        for entry in closing:
            entry.reader.close()

    # -- internals -------------------------------------------------------------------------------

    def _check_consumer_properties(self, left_out: frozenset[tuple[str, str]]) -> None:
        """Have librdkafka check the values of the consumer-only properties (once per distinct
        set), so a bad value is the same LagSourceConfigError as when they reached the client."""
        with self._lock:
            if left_out in self._checked:
                return
        try:
            config: dict[str, Any] = {**dict(left_out), "logger": log}
            AdminClient(config)  # no bootstrap.servers: it connects nowhere
        except (KafkaException, ValueError, TypeError) as e:
            raise LagSourceConfigError(f"invalid Kafka client config: {describe_error(e)}") from e
        with self._lock:
            self._checked.add(left_out)

    def _acquire(self, key: ConnectionKey) -> _Entry:
        with self._lock:
            if self._closed:
                raise LagSourceUnavailable("the operator's Kafka lag readers are closed (shutting down)")
            entry = self._entries.get(key)
            if entry is None:
                # Under the lock: two first reads of one connection must not make two clients.
                admin = self._connect(key, partial(self._count_request, key.bootstrap_servers))
                if self._metrics is not None:
                    self._metrics.kafka_admin_clients.labels(key.bootstrap_servers).inc()
                reader = ClusterLagReader(admin, window_s=self._window_s, metadata_ttl_s=self._metadata_ttl_s)
                entry = self._entries[key] = _Entry(reader=reader, idle_since=self._clock())
                log.info("new Kafka lag reader for %s; %d open", key.bootstrap_servers, len(self._entries))
                self._start_sweeping()
            entry.users += 1
            return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            entry.idle_since = self._clock()
            close_now = entry.retired and entry.users == 0
        if close_now:
            entry.reader.close()

    def _retire(self, key: ConnectionKey, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.retired = True
        log.info("dropped the Kafka lag reader for %s: its login was refused", key.bootstrap_servers)

    def _count_request(self, cluster: str, request: str) -> None:
        if self._metrics is not None:
            self._metrics.kafka_admin_requests.labels(cluster, request).inc()

    def _start_sweeping(self) -> None:
        if self._sweeper is not None:
            return
        every_s = max(1.0, self._idle_s / 4)

        def sweep() -> None:
            while not self._stop_sweeping.wait(every_s):
                self.close_idle()

        self._sweeper = threading.Thread(target=sweep, name="lag-readers-sweeper", daemon=True)
        self._sweeper.start()


class _PolicySource:
    """One policy's view of the readers, as a `LagSource`."""

    def __init__(
        self, readers: KafkaClusterReaders, settings: KafkaLagSettings, history: HistorySink | None
    ) -> None:
        self.settings = settings
        self._readers = readers
        self._history = history

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        return self._readers.read(self.settings, group_id, topics, history=self._history)

    def close(self) -> None:
        """Nothing to close: the connection outlives one read, and the readers close it when idle."""


def _connect(key: ConnectionKey, on_request: Callable[[str], None]) -> KafkaAdmin:
    return KafkaAdmin(key.bootstrap_servers, dict(key.properties), on_request=on_request)
