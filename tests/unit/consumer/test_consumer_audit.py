"""The journal audit judges what the churn and failover tests rely on: messages missing,
ownership overlapping in time, and duplicates with or without a fault to explain them."""

from __future__ import annotations

from pathlib import Path

from groupops.consumer.audit import Fault, Processed, audit, load_journals
from groupops.consumer.journal import FileJournal, NullJournal

T = "orders"


def rec(partition: int, offset: int, identity: str, start: float, end: float | None = None) -> Processed:
    return Processed(T, partition, offset, identity, start, start + 0.01 if end is None else end)


def journals_of(
    tmp_path: Path, records: list[Processed], commits: list[tuple[str, int, int, float]] = ()
) -> Path:  # type: ignore[assignment]
    by_identity: dict[str, FileJournal] = {}
    for r in records:
        journal = by_identity.setdefault(
            r.identity, FileJournal(tmp_path, r.identity, r.identity + "-incarnation")
        )
        journal.processed(r.topic, r.partition, r.offset, r.start, r.end)
    for identity, partition, offset, at in commits:
        journal = by_identity.setdefault(identity, FileJournal(tmp_path, identity, identity + "-incarnation"))
        journal.committed(T, partition, offset, at)
    for journal in by_identity.values():
        journal.close()
    return tmp_path


def test_a_clean_handoff_has_nothing_to_report(tmp_path: Path) -> None:
    records = [rec(0, 0, "a", 1.0), rec(0, 1, "a", 2.0), rec(0, 2, "b", 3.0), rec(1, 0, "b", 1.5)]
    report = audit(
        load_journals(journals_of(tmp_path, records)), [(T, 0, 0), (T, 0, 1), (T, 0, 2), (T, 1, 0)]
    )
    assert report.missing == []
    assert report.overlaps == []
    assert report.duplicates == 0
    assert report.per_identity == {"a": 2, "b": 2}


def test_a_message_nobody_processed_is_missing(tmp_path: Path) -> None:
    report = audit(load_journals(journals_of(tmp_path, [rec(0, 0, "a", 1.0)])), [(T, 0, 0), (T, 0, 1)])
    assert report.missing == [(T, 0, 1)]


def test_two_identities_processing_one_partition_at_the_same_time_overlap(tmp_path: Path) -> None:
    records = [rec(0, 5, "a", 1.0, 3.0), rec(0, 6, "b", 2.0, 2.5), rec(1, 0, "a", 2.0, 2.1)]
    report = audit(load_journals(journals_of(tmp_path, records)), [])
    assert [(x.identity, y.identity) for x, y in report.overlaps] == [("a", "b")]


def test_interleaved_ownership_is_caught_even_when_single_messages_do_not_touch(tmp_path: Path) -> None:
    records = [rec(0, 1, "a", 1.0, 5.0), rec(0, 2, "a", 1.1, 1.2), rec(0, 3, "b", 2.0, 2.1)]
    report = audit(load_journals(journals_of(tmp_path, records)), [])
    assert len(report.overlaps) == 1


def test_a_duplicate_after_a_crash_before_the_commit_is_explained(tmp_path: Path) -> None:
    records = [rec(0, 7, "a", 1.0), rec(0, 7, "b", 9.0)]
    report = audit(load_journals(journals_of(tmp_path, records)), [(T, 0, 7)], [Fault("a", "crash", 2.0)])
    assert report.duplicates == 1
    assert report.explained_duplicates == 1
    assert report.unexplained == []


def test_a_duplicate_of_a_message_already_committed_is_not_explained(tmp_path: Path) -> None:
    records = [rec(0, 7, "a", 1.0), rec(0, 7, "b", 9.0)]
    path = journals_of(tmp_path, records, commits=[("a", 0, 8, 1.5)])
    report = audit(load_journals(path), [(T, 0, 7)], [Fault("a", "crash", 2.0)])
    assert len(report.unexplained) == 1


def test_a_duplicate_without_any_fault_is_not_explained(tmp_path: Path) -> None:
    records = [rec(0, 7, "a", 1.0), rec(0, 7, "b", 9.0)]
    report = audit(load_journals(journals_of(tmp_path, records)), [(T, 0, 7)])
    assert len(report.unexplained) == 1


def test_a_self_fence_in_the_journal_explains_a_duplicate(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path, "a", "a-incarnation")
    journal.processed(T, 0, 7, 1.0, 1.01)
    journal.event("fence", 2.0, why="cut")
    journal.close()
    FileJournal(tmp_path, "b", "b-incarnation").processed(T, 0, 7, 9.0, 9.01)
    report = audit(load_journals(tmp_path), [(T, 0, 7)])
    assert report.explained_duplicates == 1


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = journals_of(tmp_path, [rec(0, 0, "a", 1.0)])
    with next(path.glob("*.jsonl")).open("a") as torn:
        torn.write('{"k":"p","i":"a","t":"orders"')
    assert len(load_journals(path).processed) == 1


def test_the_null_journal_writes_nothing(tmp_path: Path) -> None:
    journal = NullJournal()
    journal.processed(T, 0, 0, 1.0, 1.1)
    journal.committed(T, 0, 1, 1.2)
    journal.event("ack", 1.3, epoch=1)
    journal.close()
    assert list(tmp_path.iterdir()) == []
