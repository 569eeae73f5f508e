"""Where each owned partition must go on, and refusing a rewind the replica did not ask for.

Who uses it: the plan runtime (`consumer/runtime.py`), on its main thread only.

librdkafka can apply a stale offset answer to a partition that was unassigned and assigned
again: an offset lookup the earlier assignment started (a committed-offset fetch, or the oldest
offset after a reset) lands after the new assignment began, and the fetch position jumps back.
Seen in CI: a replica assigned a partition at its committed offset 83 processed 83-85, then got
offsets 0-92 again, which the partition's previous owner had processed and committed (librdkafka
issue 5345 describes the same class of race). Processing them again is a duplicate that no fault
explains.

The runtime knows where each owned partition must go on: the committed offset (or the start it
resolved) when it assigned the partition, then the offset after each message it processed, or a
position it set itself (an adopted outside commit). A message below that position is dropped, and
the runtime repositions the partition there explicitly. A position it asked librdkafka to find
(the oldest message, after a reset) is not known in advance: nothing is refused until the first
message from there is processed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from groupops.model import TopicPartition

__all__ = ["ExpectedPositions"]


class ExpectedPositions:
    """The next offset each owned partition must deliver, where known."""

    def __init__(self) -> None:
        self._next: dict[TopicPartition, int] = {}

    def expect(self, tp: TopicPartition, offset: int | None) -> None:
        """From now on `tp` goes on at `offset` (None: unknown, accept what comes)."""
        if offset is None or offset < 0:
            self._next.pop(tp, None)
        else:
            self._next[tp] = offset

    def processed(self, tp: TopicPartition, offset: int) -> None:
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._next.pop(tp, None)

    def clear(self) -> None:
        self._next.clear()

    def next_of(self, tp: TopicPartition) -> int | None:
        return self._next.get(tp)

    def split(self, messages: Sequence[Any]) -> tuple[list[Any], dict[TopicPartition, tuple[int, int]]]:
        """(the messages at or after their partition's position, in order; for each partition
        that went back, (the lowest offset delivered below the position, the position))."""
        kept: list[Any] = []
        rewound: dict[TopicPartition, tuple[int, int]] = {}
        for message in messages:
            tp = TopicPartition(message.topic(), message.partition())
            expected = self._next.get(tp)
            if expected is not None and message.offset() < expected:
                lowest = rewound.get(tp, (message.offset(), expected))[0]
                rewound[tp] = (min(lowest, message.offset()), expected)
                continue
            kept.append(message)
        return kept, rewound
