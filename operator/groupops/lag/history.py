"""Offset history: what the `kafka` lag source read, as snapshot rows appended to a Kafka topic.

The pipeline's input (groupops.pipeline.schema describes the record in all its forms) starts here,
below the pipeline, so that the operator's own lag reads can append to it: with an
`OffsetHistory` in its `SourceContext`, every `read` of the kafka source appends one row per
partition (with the member owning it, from the same DescribeGroups) to a topic on the cluster it
read. `groupops snapshot` writes the same rows through the same `KafkaSink`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupops.lag.kafka import GroupOffsets
from groupops.model import TopicPartition

__all__ = [
    "KAFKA_SCHEME",
    "HistorySink",
    "KafkaSink",
    "OffsetHistory",
    "PlannedOwners",
    "SnapshotError",
    "SnapshotRow",
    "SnapshotSinkError",
    "from_json",
    "rows_from_offsets",
    "to_json",
]

log = logging.getLogger(__name__)

KAFKA_SCHEME = "kafka://"


class SnapshotRow(TypedDict):
    """One snapshot row in Python; `ts` is seconds since the epoch (UTC)."""

    ts: float
    cluster: str
    group: str
    topic: str
    partition: int
    log_start: int
    log_end: int
    committed: int | None
    member: str | None


def to_json(row: SnapshotRow) -> bytes:
    """The Kafka message value of one row (compact JSON, UTF-8)."""
    return json.dumps(row, separators=(",", ":")).encode()


def from_json(value: bytes) -> SnapshotRow:
    """Inverse of `to_json` (a missing `member` reads as null)."""
    document = json.loads(value)
    return SnapshotRow(
        ts=float(document["ts"]),
        cluster=str(document["cluster"]),
        group=str(document["group"]),
        topic=str(document["topic"]),
        partition=int(document["partition"]),
        log_start=int(document["log_start"]),
        log_end=int(document["log_end"]),
        committed=None if document["committed"] is None else int(document["committed"]),
        member=document.get("member"),
    )


class SnapshotError(Exception):
    """Base of snapshot capture and sink failures."""


class SnapshotSinkError(SnapshotError):
    """Appending rows to the sink failed."""


def rows_from_offsets(
    offsets: GroupOffsets, *, cluster: str, owners: Mapping[TopicPartition, str] | None = None
) -> list[SnapshotRow]:
    """One row per partition of a group read. `owners` maps a partition to its member; when given,
    partitions without an owner get member "" (no owner); when None, member is null (not read)."""
    rows: list[SnapshotRow] = []
    for tp in sorted(offsets.offsets):
        raw = offsets.offsets[tp]
        rows.append(
            SnapshotRow(
                ts=offsets.taken_at,
                cluster=cluster,
                group=offsets.group_id,
                topic=tp.topic,
                partition=tp.partition,
                log_start=raw.log_start,
                log_end=raw.log_end,
                committed=raw.committed,
                member=None if owners is None else owners.get(tp, ""),
            )
        )
    return rows


# -- appending to a topic ------------------------------------------------------------------------


class KafkaSink:
    """Appends JSON rows to a Kafka topic (created with `partitions` when missing)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        client_config: Mapping[str, str] | None = None,
        partitions: int = 1,
        timeout_s: float = 15.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        config: dict[str, Any] = {**(client_config or {}), "bootstrap.servers": bootstrap}
        self._ensure_topic(config, partitions)
        self._producer = Producer({**config, "linger.ms": 20, "acks": "all", "logger": log})

    def describe(self) -> str:
        return f"{KAFKA_SCHEME}{self.topic} on {self.bootstrap}"

    def _ensure_topic(self, config: dict[str, Any], partitions: int) -> None:
        admin_config: dict[str, Any] = {**config, "logger": log}
        admin = AdminClient(admin_config)
        try:
            listed = admin.list_topics(timeout=self.timeout_s)
            if self.topic in listed.topics:
                return
            future = admin.create_topics([NewTopic(self.topic, partitions)], request_timeout=self.timeout_s)
            future[self.topic].result(timeout=self.timeout_s + 1)
        except KafkaException as e:
            error = e.args[0] if e.args else e
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another writer created it between our listing and our request
            raise SnapshotSinkError(f"cannot create topic {self.topic!r} on {self.bootstrap}: {error}") from e

    def write(self, rows: Sequence[SnapshotRow]) -> None:
        failures: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))

        try:
            for row in rows:
                self._producer.produce(
                    self.topic, key=row["group"].encode(), value=to_json(row), on_delivery=delivered
                )
                self._producer.poll(0)
        except (KafkaException, BufferError) as e:
            raise SnapshotSinkError(f"cannot produce to {self.describe()}: {e}") from e
        left = self._producer.flush(self.timeout_s)
        if left or failures:
            reason = failures[0] if failures else f"{left} message(s) still queued after {self.timeout_s:g} s"
            raise SnapshotSinkError(f"cannot produce to {self.describe()}: {reason}")

    def close(self) -> None:
        self._producer.flush(self.timeout_s)


class OffsetHistory:
    """Appends every read of the operator's `kafka` lag source to `topic` on the cluster read.

    One producer per cluster (bootstrap + client properties), shared by every policy's reads and
    kept for the operator's life. A failed append is logged and counted, never fails the read:
    the plan must not wait for the history.
    """

    def __init__(self, topic: str, *, partitions: int = 1) -> None:
        if not topic.strip():
            raise ValueError("the offset history topic is empty")
        self.topic = topic
        self.partitions = partitions
        self.failures = 0
        self._sinks: dict[tuple[str, tuple[tuple[str, str], ...]], KafkaSink] = {}
        self._lock = threading.Lock()

    def record(
        self,
        offsets: GroupOffsets,
        *,
        bootstrap: str,
        client_config: Mapping[str, str],
        owners: Mapping[TopicPartition, str] | None = None,
    ) -> int:
        """Append one row per partition of `offsets`; returns how many (0 after a failure).
        `owners`: who owns each partition when not the group's members (`PlannedOwners`)."""
        rows = rows_from_offsets(
            offsets, cluster=bootstrap, owners=offsets.owners if owners is None else owners
        )
        try:
            self._sink(bootstrap, client_config).write(rows)
        except SnapshotError as e:
            self.failures += 1
            log.warning("offset history of group %r not appended: %s", offsets.group_id, e)
            return 0
        return len(rows)

    def _sink(self, bootstrap: str, client_config: Mapping[str, str]) -> KafkaSink:
        key = (bootstrap, tuple(sorted(client_config.items())))
        with self._lock:
            sink = self._sinks.get(key)
            if sink is None:
                sink = KafkaSink(
                    bootstrap, self.topic, client_config=client_config, partitions=self.partitions
                )
                self._sinks[key] = sink
            return sink

    def close(self) -> None:
        with self._lock:
            sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.close()


class HistorySink(Protocol):
    """Where the `kafka` source appends what it read: `OffsetHistory`, or `PlannedOwners` around it."""

    def record(self, offsets: GroupOffsets, *, bootstrap: str, client_config: Mapping[str, str]) -> int: ...


@dataclass(frozen=True, slots=True)
class PlannedOwners:
    """The history of a policy whose replicas follow the operator's plan (delivery plan). They
    assign partitions to themselves and never join the Kafka group, so DescribeGroups names no
    owner and every row would say "" (nobody): the Spark `plan` job then has no members to plan
    for. Its rows name the published plan's owner instead (its identity, as `group.instance.id`
    would), whenever Kafka reports no member owning anything."""

    history: OffsetHistory
    owners: Mapping[TopicPartition, str]

    def record(self, offsets: GroupOffsets, *, bootstrap: str, client_config: Mapping[str, str]) -> int:
        planned = None if offsets.owners else dict(self.owners)
        return self.history.record(offsets, bootstrap=bootstrap, client_config=client_config, owners=planned)
