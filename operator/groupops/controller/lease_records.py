"""Each consumer Lease's annotations parsed once per content (docs/design.md §8.3, "a busy run
parses each Lease once per content"; §7.5 for the heartbeat answerer).

A run reads every replica's Lease several times (the identity view, the handoff's member states,
the plan progress, the fencer), and the heartbeat answerer reads it at every heartbeat; the
annotations change only when the replica or the operator writes them. Parsing them (the
partition list is JSON) was about a fifteenth of the operator's main process on a busy fleet.
The record kept for a Lease is returned while its annotations are equal to the ones it was
parsed from: the key is the content itself, so a stale answer is impossible whatever wrote the
Lease, and objects without a resourceVersion (tests, tools) are served as correctly as others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupops.planner.plan_format import LeaseRecord, lease_record

__all__ = ["LEASE_RECORDS", "LeaseRecords"]


class LeaseRecords:
    """`of(lease)`: the Lease's `LeaseRecord` (PlanFormatError for malformed partitions, as
    `lease_record`); one entry per (namespace, name), replaced when the annotations change,
    dropped by `forget`. Safe from several threads: each step is one dict operation under the
    GIL, and two threads parsing the same Lease store equal records."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[dict[str, str], LeaseRecord]] = {}

    def of(self, lease: Mapping[str, Any]) -> LeaseRecord:
        meta = lease.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        annotations = meta.get("annotations")
        notes: Mapping[str, str] = annotations if isinstance(annotations, Mapping) else {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        known = self._known.get(key)
        if known is not None and known[0] == notes:
            return known[1]
        record = lease_record(notes)
        self._known[key] = (dict(notes), record)
        return record

    def forget(self, namespace: str, name: str) -> None:
        self._known.pop((namespace, name), None)

    def __len__(self) -> int:
        return len(self._known)


LEASE_RECORDS = LeaseRecords()
"""The operator's main process's records (the heartbeat process keeps its own)."""
