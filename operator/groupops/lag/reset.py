"""Resetting a group's committed offsets, as `kafka-consumer-groups --reset-offsets` does:
to the earliest or latest offset, to the first offset at or after a time, by a shift, or to an
offset; always clamped to the partition's log (start to end), like Kafka's tool.

Who calls it: the operator's offset-reset step (controller/offset_reset.py), after the policy's
replicas released the partitions (docs/design.md §9.3). `plan_reset` is pure (offsets in, new
offsets out); `read_reset` and `apply_reset` do the Kafka round trips on one connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from groupops.lag.base import LagSourceUnavailable
from groupops.lag.kafka import GroupOffsets, KafkaLagSource
from groupops.lag.kafka_admin import Deadline
from groupops.model import TopicPartition

__all__ = ["PartitionReset", "ResetKind", "ResetTarget", "apply_reset", "plan_reset", "read_reset"]


class ResetKind(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    DATETIME = "datetime"
    SHIFT = "shift"
    OFFSET = "offset"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where to: `value` is the time in epoch milliseconds (datetime), the shift (may be
    negative), or the offset; None for earliest and latest."""

    kind: ResetKind
    value: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionReset:
    """One row of the reset table: the committed offset before (None: never committed) and the
    new one."""

    partition: TopicPartition
    before: int | None
    after: int
    log_start: int
    log_end: int


def plan_reset(
    offsets: GroupOffsets,
    partitions: Sequence[TopicPartition],
    target: ResetTarget,
    by_time: Mapping[TopicPartition, int] | None = None,
) -> list[PartitionReset]:
    """The new offset of each partition under `target`, clamped to its log. `by_time`: the first
    offset at or after the time, per partition (-1 when no message is that recent: the end)."""
    rows: list[PartitionReset] = []
    for tp in sorted(partitions):
        known = offsets.offsets[tp]
        start, end, committed = known.log_start, known.log_end, known.committed
        if target.kind is ResetKind.EARLIEST:
            wanted = start
        elif target.kind is ResetKind.LATEST:
            wanted = end
        elif target.kind is ResetKind.DATETIME:
            found = (by_time or {}).get(tp, -1)
            wanted = end if found < 0 else found
        elif target.kind is ResetKind.SHIFT:
            # Kafka's tool shifts from the committed offset (from the reset rule's position when
            # there is none: here the log start).
            wanted = (start if committed is None else committed) + int(target.value or 0)
        else:
            wanted = int(target.value or 0)
        rows.append(PartitionReset(tp, committed, max(start, min(end, wanted)), start, end))
    return rows


def read_reset(
    source: KafkaLagSource, group_id: str, partitions: Sequence[TopicPartition], target: ResetTarget
) -> list[PartitionReset]:
    """Read what the reset needs (log bounds, commits, offsets by time) and plan it."""
    topics = sorted({tp.topic for tp in partitions})
    offsets = source.read_group(group_id, topics)
    unknown = [tp for tp in partitions if tp not in offsets.offsets]
    if unknown:
        raise ValueError(f"no such partitions: {', '.join(str(tp) for tp in unknown)}")
    by_time = None
    if target.kind is ResetKind.DATETIME:
        by_time = _offsets_at(source, partitions, int(target.value or 0))
    return plan_reset(offsets, partitions, target, by_time)


def _offsets_at(
    source: KafkaLagSource, partitions: Sequence[TopicPartition], at_ms: int
) -> dict[TopicPartition, int]:
    deadline = Deadline(source.settings.timeout_s, source.settings.bootstrap_servers)
    futures = source.admin.offsets_at(partitions, at_ms, deadline.remaining())
    return {
        tp: int(source.admin.result(future, deadline, f"offset of {tp} at {at_ms} ms").offset)
        for tp, future in futures.items()
    }


def apply_reset(source: KafkaLagSource, group_id: str, rows: Sequence[PartitionReset]) -> None:
    """Commit the new offsets for the group (Kafka accepts it only while the group has no
    members; plan-delivery replicas are never members)."""
    if not rows:
        return
    deadline = Deadline(source.settings.timeout_s, source.settings.bootstrap_servers)
    future = source.admin.alter_group_offsets(
        group_id, {row.partition: row.after for row in rows}, deadline.remaining()
    )
    answer = source.admin.result(future, deadline, f"new offsets of group {group_id!r}")
    failed = [
        f"{tp.topic}-{tp.partition}: {tp.error}" for tp in answer.topic_partitions if tp.error is not None
    ]
    if failed:
        raise LagSourceUnavailable(f"Kafka refused new offsets of group {group_id!r}: {'; '.join(failed)}")
