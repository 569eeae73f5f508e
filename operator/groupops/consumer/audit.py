"""Reading processing journals back (journal.py writes them) and judging them: at-least-once,
never two owners at once, duplicates only where a fault explains them.

Who calls it: the churn and failover tests, the failover benchmark. Pure over the records it is
given, apart from `load_journals`.

Judgements of `audit`:
1. missing: produced messages no identity processed (at-least-once says none);
2. overlaps: two records of one partition by different identities whose processing intervals
   intersect (the fenced handoff says none);
3. duplicates: messages processed more than once, each classified: *explained* when the earlier
   processing's identity suffered a fault (crash, freeze, API cut, a self-fence) after it and
   before the later processing, and had not journaled a commit covering the message before that
   fault; otherwise *unexplained* (a graceful handoff commits before it acknowledges, so it
   causes none).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

__all__ = ["AuditReport", "Fault", "Journals", "Processed", "audit", "load_journals"]


@dataclass(frozen=True, slots=True)
class Processed:
    topic: str
    partition: int
    offset: int
    identity: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Fault:
    """Something that may cost re-processing: `kind` crash, freeze, cut, fence, ...; at `at`."""

    identity: str
    kind: str
    at: float


@dataclass(slots=True)
class Journals:
    processed: list[Processed] = field(default_factory=list)
    commits: dict[tuple[str, str, int], list[tuple[float, int]]] = field(default_factory=dict)
    """(identity, topic, partition) -> [(time, committed next offset), ...] in time order."""
    events: list[dict[str, Any]] = field(default_factory=list)

    def fences(self) -> list[Fault]:
        return [Fault(str(e["i"]), "fence", float(e["w"])) for e in self.events if e.get("k") == "fence"]


def load_journals(directory: Path) -> Journals:
    """Every `*.jsonl` under `directory`. A torn last line (the writer was killed) is skipped."""
    result = Journals()
    commits: dict[tuple[str, str, int], list[tuple[float, int]]] = defaultdict(list)
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = record.get("k")
            if kind == "p":
                result.processed.append(
                    Processed(record["t"], record["p"], record["o"], record["i"], record["s"], record["e"])
                )
            elif kind == "c":
                commits[(record["i"], record["t"], record["p"])].append((record["w"], record["o"]))
            else:
                result.events.append(record)
    result.commits = {key: sorted(values) for key, values in commits.items()}
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    produced: int
    processed: int
    unique: int
    missing: list[tuple[str, int, int]]
    duplicates: int
    explained_duplicates: int
    unexplained: list[tuple[Processed, Processed]]
    overlaps: list[tuple[Processed, Processed]]
    per_identity: Mapping[str, int]

    def summary(self) -> str:
        return (
            f"produced {self.produced}, processed {self.processed} ({self.unique} unique), "
            f"missing {len(self.missing)}, duplicates {self.duplicates} "
            f"({self.explained_duplicates} explained by faults, {len(self.unexplained)} unexplained), "
            f"overlapping ownership {len(self.overlaps)}"
        )


def audit(
    journals: Journals,
    produced: Iterable[tuple[str, int, int]],
    faults: Iterable[Fault] = (),
) -> AuditReport:
    """Judge the journals against the produced (topic, partition, offset) triples; see above."""
    expected = set(produced)
    by_partition: dict[tuple[str, int], list[Processed]] = defaultdict(list)
    by_message: dict[tuple[str, int, int], list[Processed]] = defaultdict(list)
    per_identity: dict[str, int] = defaultdict(int)
    for record in journals.processed:
        by_partition[(record.topic, record.partition)].append(record)
        by_message[(record.topic, record.partition, record.offset)].append(record)
        per_identity[record.identity] += 1
    all_faults = sorted([*faults, *journals.fences()], key=lambda f: f.at)
    faults_of: dict[str, list[Fault]] = defaultdict(list)
    for fault in all_faults:
        faults_of[fault.identity].append(fault)

    unexplained: list[tuple[Processed, Processed]] = []
    duplicates = explained = 0
    for records in by_message.values():
        if len(records) < 2:
            continue
        ordered = sorted(records, key=lambda r: r.start)
        for earlier, later in pairwise(ordered):
            duplicates += 1
            if _explained(earlier, later, faults_of, journals.commits):
                explained += 1
            else:
                unexplained.append((earlier, later))
    return AuditReport(
        produced=len(expected),
        processed=len(journals.processed),
        unique=len(by_message),
        missing=sorted(expected - set(by_message)),
        duplicates=duplicates,
        explained_duplicates=explained,
        unexplained=unexplained,
        overlaps=_overlaps(by_partition),
        per_identity=dict(per_identity),
    )


def _explained(
    earlier: Processed,
    later: Processed,
    faults_of: Mapping[str, list[Fault]],
    commits: Mapping[tuple[str, str, int], list[tuple[float, int]]],
) -> bool:
    for fault in faults_of.get(earlier.identity, []):
        if not earlier.start <= fault.at <= later.start:
            continue
        covering = [
            at
            for at, next_offset in commits.get((earlier.identity, earlier.topic, earlier.partition), [])
            if next_offset > earlier.offset and earlier.end <= at <= fault.at
        ]
        if not covering:
            return True
    return False


def _overlaps(by_partition: Mapping[tuple[str, int], list[Processed]]) -> list[tuple[Processed, Processed]]:
    """Pairs of records by different identities with intersecting intervals, one per clash: a
    sweep in start order against the record that ends last so far."""
    found: list[tuple[Processed, Processed]] = []
    for records in by_partition.values():
        latest: Processed | None = None
        for record in sorted(records, key=lambda r: (r.start, r.end)):
            if latest is not None and record.start < latest.end and record.identity != latest.identity:
                found.append((latest, record))
            if latest is None or record.end > latest.end:
                latest = record
    return found
