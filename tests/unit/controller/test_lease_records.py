"""A Lease's record is parsed once per content and is always the record of the annotations shown:
whatever sequence of writes a Lease goes through (the same resourceVersion reused, annotations
edited, malformed partitions, the Lease deleted), `LeaseRecords.of` answers what a fresh
`lease_record` of the same annotations answers (docs/design.md §8.3)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.controller.lease_records import LeaseRecords
from groupops.model import TopicPartition
from groupops.planner.plan_format import (
    LEASE_INCARNATION_ANNOTATION,
    LEASE_STATE_ANNOTATION,
    lease_record,
)
from groupops.planner.wire import (
    LEASE_EPOCH_ANNOTATION,
    LEASE_PARTITIONS_ANNOTATION,
    PlanFormatError,
    encode_partitions,
)


def lease(name: str, annotations: dict[str, str] | None, version: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": version}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"holderIdentity": "x"}}


def fresh(annotations: dict[str, str] | None) -> object:
    try:
        return lease_record(annotations)
    except PlanFormatError:
        return PlanFormatError


TWO = encode_partitions([TopicPartition("a", 0), TopicPartition("a", 1)])
ONE = encode_partitions([TopicPartition("a", 2)])
NONE = encode_partitions([])

ANNOTATIONS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            LEASE_EPOCH_ANNOTATION: st.sampled_from(["1", "2", "17", "x", ""]),
            LEASE_PARTITIONS_ANNOTATION: st.sampled_from(
                ['["a-0","a-1"]', '["a-2"]', "[]", "not json", '{"a":1}']
            ),
            LEASE_STATE_ANNOTATION: st.sampled_from(["active", "starting", "draining", "unknown"]),
            LEASE_INCARNATION_ANNOTATION: st.sampled_from(["pod-1", "pod-2"]),
        },
    ),
)


@settings(max_examples=300, deadline=None)
@given(writes=st.lists(st.tuples(st.sampled_from(["a", "b"]), ANNOTATIONS, st.booleans()), max_size=25))
def test_the_record_is_always_that_of_the_annotations_shown(
    writes: list[tuple[str, dict[str, str] | None, bool]],
) -> None:
    records = LeaseRecords()
    for name, notes, deleted in writes:
        if deleted:
            records.forget("ns", name)
            continue
        expected = fresh(notes)
        # The resourceVersion never moves: the record must follow the content, not the version.
        shown = lease(name, None if notes is None else dict(notes), version="7")
        try:
            got: object = records.of(shown)
        except PlanFormatError:
            got = PlanFormatError
        assert got == expected


def test_equal_annotations_are_parsed_once() -> None:
    records = LeaseRecords()
    notes = {LEASE_EPOCH_ANNOTATION: "3", LEASE_PARTITIONS_ANNOTATION: TWO}
    first = records.of(lease("a", notes))
    again = records.of(lease("a", dict(notes), version="9"))
    assert again is first  # the kept record, not a new parse
    assert first.acked_epoch == 3 and [tp.partition for tp in first.partitions] == [0, 1]
    changed = records.of(lease("a", {**notes, LEASE_EPOCH_ANNOTATION: "4"}))
    assert changed.acked_epoch == 4 and changed is not first
    records.forget("ns", "a")
    assert len(records) == 0


def test_malformed_partitions_raise_every_time() -> None:
    records = LeaseRecords()
    bad = lease("a", {LEASE_PARTITIONS_ANNOTATION: "not json"})
    for _ in range(2):
        with pytest.raises(PlanFormatError):
            records.of(bad)
