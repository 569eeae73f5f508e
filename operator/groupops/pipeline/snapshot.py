"""Offset snapshots: capture them from a live cluster, append them to a sink.

Stage: the pipeline's input. `groupops snapshot` runs `capture_loop`; anything holding a
`GroupOffsets` from the `kafka` lag source (groupops.lag.kafka) can turn it into rows with
`rows_from_offsets` and append them with a sink. No Spark here: capture runs anywhere.

Sinks (the row format is groupops.pipeline.schema):
- `ParquetSink(root)`: one file per write under `root/date=yyyy-mm-dd/`, written under a hidden
  name then renamed, so a reader (Spark skips names starting with `.` or `_`) never sees half a file;
- `KafkaSink(bootstrap, topic)`: one JSON message per row, keyed by group id (a group's rows stay
  in order on one partition); the topic is created when missing.
`open_sink("PATH" | "kafka://topic" | "kafka://host:port/topic", bootstrap=...)` picks one.

Errors:
    SnapshotError
    ├── SnapshotTargetError   the --to target is malformed
    └── SnapshotSinkError     a write failed (disk, broker); the capture loop stops
Lag-source errors (groupops.lag.LagError) pass through unchanged.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from groupops.lag.base import LagSourceConfigError
from groupops.lag.history import (
    KafkaSink,
    SnapshotError,
    SnapshotRow,
    SnapshotSinkError,
    rows_from_offsets,
)
from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource, UnknownGroupError
from groupops.pipeline.schema import arrow_schema, kafka_target, utc_date

__all__ = [
    "CaptureSettings",
    "KafkaSink",
    "ParquetSink",
    "SnapshotCapture",
    "SnapshotError",
    "SnapshotSink",
    "SnapshotSinkError",
    "SnapshotTargetError",
    "TickReport",
    "capture_loop",
    "open_sink",
    "rows_from_offsets",
]

log = logging.getLogger(__name__)


class SnapshotTargetError(SnapshotError):
    """The sink target cannot be understood."""


# -- sinks --------------------------------------------------------------------------------------


class SnapshotSink(Protocol):
    """Where rows go. `write` appends (raises SnapshotSinkError); `describe` names the target."""

    def write(self, rows: Sequence[SnapshotRow]) -> None: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


class ParquetSink:
    """Appends to a Parquet dataset partitioned by UTC date (`root/date=yyyy-mm-dd/*.parquet`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return str(self.root)

    def write(self, rows: Sequence[SnapshotRow]) -> None:
        by_date: dict[str, list[SnapshotRow]] = defaultdict(list)
        for row in rows:
            by_date[utc_date(row["ts"])].append(row)
        schema = arrow_schema()
        for date, dated in sorted(by_date.items()):
            columns: dict[str, list[Any]] = {name: [row[name] for row in dated] for name in schema.names}  # type: ignore[literal-required]
            columns["ts"] = [round(row["ts"] * 1_000_000) for row in dated]
            table = pa.Table.from_pydict(columns, schema=schema)
            directory = self.root / f"date={date}"
            name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
            try:
                directory.mkdir(parents=True, exist_ok=True)
                hidden = directory / f".{name}"
                pq.write_table(table, hidden)
                os.replace(hidden, directory / name)
            except OSError as e:
                raise SnapshotSinkError(f"cannot write snapshots to {directory}: {e.strerror}") from e

    def close(self) -> None:
        """Nothing buffered: every write is a closed file."""


def open_sink(
    target: str, *, bootstrap: str | None, client_config: Mapping[str, str] | None = None
) -> SnapshotSink:
    """`PATH` → ParquetSink; `kafka://topic` → KafkaSink on `bootstrap`; `kafka://host:port/topic`
    → KafkaSink on that cluster."""
    kafka = kafka_target(target, bootstrap=bootstrap)
    if kafka is None:
        if not target.strip():
            raise SnapshotTargetError("empty target: give a directory or kafka://topic")
        return ParquetSink(Path(target))
    servers, topic = kafka
    if not topic:
        raise SnapshotTargetError(f"no topic in {target!r}: write kafka://topic or kafka://host:port/topic")
    if not servers:
        raise SnapshotTargetError(f"no brokers for {target!r}: give --bootstrap or kafka://host:port/topic")
    return KafkaSink(servers, topic, client_config=client_config)


# -- capture ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSettings:
    """What to capture.

    bootstrap: the cluster's brokers; cluster: the name written in every row (default: bootstrap);
    groups: group ids to read, empty for every consumer group the cluster lists;
    topics: restrict to these topics (empty: the topics each group committed on);
    members: also read who owns each partition (one DescribeGroups per group);
    timeout_s: bound on one group's read.
    """

    bootstrap: str
    cluster: str | None = None
    groups: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    members: bool = True
    timeout_s: float = 6.0
    client_config: Mapping[str, str] = field(default_factory=dict)


class SnapshotCapture:
    """Reads offsets through the `kafka` lag source, and membership through DescribeGroups."""

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.cluster = settings.cluster or settings.bootstrap
        self._source = KafkaLagSource(
            KafkaLagSettings(
                bootstrap_servers=settings.bootstrap,
                timeout_s=settings.timeout_s,
                client_config=dict(settings.client_config),
            )
        )
        admin_config: dict[str, Any] = {
            **settings.client_config,
            "bootstrap.servers": settings.bootstrap,
            "logger": log,
        }
        self._admin = AdminClient(admin_config)

    def group_ids(self) -> list[str]:
        """The configured groups, or every consumer group the cluster lists."""
        if self.settings.groups:
            return list(self.settings.groups)
        try:
            listing = self._admin.list_consumer_groups(request_timeout=self.settings.timeout_s).result(
                timeout=self.settings.timeout_s + 1
            )
        except KafkaException as e:
            raise SnapshotError(f"cannot list consumer groups on {self.settings.bootstrap}: {e}") from e
        return sorted(listing_item.group_id for listing_item in listing.valid)

    def capture_group(self, group_id: str) -> list[SnapshotRow]:
        offsets = self._source.read_group(group_id, list(self.settings.topics))
        owners = offsets.owners if self.settings.members else None
        return rows_from_offsets(offsets, cluster=self.cluster, owners=owners)

    def capture(self) -> list[SnapshotRow]:
        """One snapshot of every group. When the groups come from the cluster's listing (no
        --group), a group that cannot be read without naming topics (no commits yet, or gone
        since the listing) is skipped; a group asked for by name always raises."""
        rows: list[SnapshotRow] = []
        listed = not self.settings.groups
        for group_id in self.group_ids():
            try:
                rows.extend(self.capture_group(group_id))
            except (LagSourceConfigError, UnknownGroupError) as e:
                if not listed:
                    raise
                log.debug("snapshot: skipping group %r: %s", group_id, e)
        return rows

    def close(self) -> None:
        self._source.close()


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one capture round did."""

    tick: int
    ts: float
    rows: int
    groups: int
    total_lag: int


def capture_loop(
    capture: SnapshotCapture,
    sink: SnapshotSink,
    *,
    every_s: float,
    count: int | None,
    on_tick: Callable[[TickReport], None] = lambda _report: None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TickReport]:
    """Capture and append every `every_s` seconds (on a fixed schedule, so a slow round does not
    drift the next), `count` times or forever when None."""
    reports: list[TickReport] = []
    started = time.monotonic()
    tick = 0
    while count is None or tick < count:
        rows = capture.capture()
        sink.write(rows)
        report = TickReport(
            tick=tick,
            ts=time.time(),
            rows=len(rows),
            groups=len({row["group"] for row in rows}),
            total_lag=_total_lag(rows),
        )
        reports.append(report)
        on_tick(report)
        tick += 1
        if count is not None and tick >= count:
            break
        sleep(max(0.0, started + tick * every_s - time.monotonic()))
    return reports


def _total_lag(rows: Iterable[SnapshotRow]) -> int:
    return sum(max(0, row["log_end"] - row["committed"]) for row in rows if row["committed"] is not None)
