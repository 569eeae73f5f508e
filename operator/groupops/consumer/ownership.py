"""Fencing for what the user's callback does outside Kafka.

The runtime stores a message's offset only if the replica still owned its partition, with a valid
Lease, when the callback returned; but a write the callback made to a database or an API before a
freeze cannot be taken back. Two tools for such callbacks:

- `owns(topic, partition)`: True while this replica owns the partition and its Lease is valid,
  with no fence or lapse of validity since it last applied a plan (docs/design.md §7.6).
  Ask it right before an external side effect (a check, not a guarantee: a freeze may still come
  between the check and the write).
- `fencing_token()`: the plan epoch this replica applied. A partition only moves to a replica at
  a later epoch than its previous owner applied, so a sink that stores the highest token it has
  seen per partition and refuses lower ones fences a frozen former owner for good.

Both answer for the runtime running in this process (one per process); False and None outside one.
"""

from __future__ import annotations

from typing import Protocol

from groupops.model import TopicPartition

__all__ = ["Ownership", "fencing_token", "owns", "running"]


class Ownership(Protocol):
    def owns_now(self, tp: TopicPartition) -> bool: ...

    def applied_epoch(self) -> int | None: ...


_current: list[Ownership] = []


def running(runtime: Ownership | None) -> None:
    """The runtime calls this when it starts (its own object) and when it stops (None)."""
    _current[:] = [] if runtime is None else [runtime]


def owns(topic: str, partition: int) -> bool:
    return bool(_current) and _current[0].owns_now(TopicPartition(topic, partition))


def fencing_token() -> int | None:
    return _current[0].applied_epoch() if _current else None
