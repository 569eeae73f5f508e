"""The plan ConfigMap and the consumer Lease: what is written reads back the same, and what is
malformed is refused with the key named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import (
    LEASE_RELEASED_THROUGH_ANNOTATION,
    RELEASING_ANNOTATION,
    LeaseRecord,
    LeaseState,
    PlanFormatError,
    PublishedPlan,
    Release,
    fence_annotations,
    format_micro_time,
    lease_record,
    lease_record_annotations,
    parse_micro_time,
    plan_from_configmap,
    plan_to_configmap,
    render_lease,
    render_plan_configmap,
)

topics = st.sampled_from(["orders", "refunds", "a.b_c-d"])
partitions = st.builds(TopicPartition, topics, st.integers(min_value=0, max_value=500))
identities = st.integers(min_value=0, max_value=20).map(lambda i: MemberId(f"orders-processor-{i}"))


@st.composite
def published_plans(draw: st.DrawFn) -> PublishedPlan:
    owners = draw(st.dictionaries(partitions, st.one_of(identities, st.none()), max_size=30))
    members = draw(st.sets(identities, max_size=5))
    assignment: dict[MemberId, list[TopicPartition]] = {m: [] for m in members}
    releasing: dict[TopicPartition, Release] = {}
    for tp, owner in owners.items():
        if owner is None:
            releasing[tp] = Release(
                identity=draw(identities),
                epoch=draw(st.integers(0, 10**6)),
                since=draw(st.integers(0, 2 * 10**9)),
            )
        else:
            assignment.setdefault(owner, []).append(tp)
    plan = Plan(
        epoch=draw(st.integers(0, 10**9)),
        strategy=draw(st.sampled_from(["lag", "range"])),
        assignment={m: tuple(sorted(tps)) for m, tps in assignment.items()},
    )
    return PublishedPlan(plan=plan, releasing=releasing)


@settings(max_examples=200)
@given(published_plans())
def test_a_published_plan_reads_back_the_same(published: PublishedPlan) -> None:
    parts = plan_to_configmap(published)
    assert plan_from_configmap(parts["data"], parts["annotations"]) == published


def test_the_configmap_carries_wire_data_and_the_pending_releases() -> None:
    published = PublishedPlan(
        plan=Plan(
            epoch=7,
            strategy="lag",
            assignment={MemberId("g-0"): (TopicPartition("t", 1),), MemberId("g-1"): ()},
        ),
        releasing={TopicPartition("t", 0): Release(identity=MemberId("g-1"), epoch=7, since=12.5)},
    )
    configmap = render_plan_configmap("ns", "orders", published)
    assert configmap["metadata"]["name"] == "orders-plan"
    assert configmap["metadata"]["labels"] == {"groupops.dev/policy": "orders"}
    assert configmap["data"] == {"epoch": "7", "strategy": "lag", "g-0": '[["t",1]]', "g-1": "[]"}
    assert configmap["metadata"]["annotations"] == {RELEASING_ANNOTATION: '[["t",0,"g-1",7,12.5]]'}


def test_a_configmap_without_the_annotation_has_nothing_pending() -> None:
    published = plan_from_configmap({"epoch": "3", "strategy": "lag", "g-0": "[]"}, None)
    assert published.releasing == {}
    assert published.epoch == 3


@pytest.mark.parametrize(
    ("data", "annotations", "key"),
    [
        pytest.param({"epoch": "x"}, {}, "epoch", id="epoch not a number"),
        pytest.param({"epoch": "1", "g-0": "[[1,2]]"}, {}, "g-0", id="identity entry malformed"),
        pytest.param(
            {"epoch": "1"}, {RELEASING_ANNOTATION: "{"}, RELEASING_ANNOTATION, id="releasing not JSON"
        ),
        pytest.param(
            {"epoch": "1"},
            {RELEASING_ANNOTATION: '[["t",0,"g-1",-1,0]]'},
            RELEASING_ANNOTATION,
            id="negative epoch",
        ),
        pytest.param(
            {"epoch": "1"}, {RELEASING_ANNOTATION: '{"a":1}'}, RELEASING_ANNOTATION, id="releasing not a list"
        ),
    ],
)
def test_a_malformed_plan_names_the_key(data: dict[str, str], annotations: dict[str, str], key: str) -> None:
    with pytest.raises(PlanFormatError) as caught:
        plan_from_configmap(data, annotations)
    assert caught.value.key == key


@given(
    st.builds(
        LeaseRecord,
        acked_epoch=st.one_of(st.none(), st.integers(0, 10**9)),
        partitions=st.lists(partitions, unique=True).map(lambda tps: tuple(sorted(tps))),
        state=st.one_of(st.none(), st.sampled_from(LeaseState)),
        released_through=st.one_of(st.none(), st.integers(0, 10**9)),
        incarnation=st.one_of(st.none(), st.uuids().map(str)),
        stopped=st.dictionaries(partitions, st.integers(0, 10**12), max_size=5).map(
            lambda stopped: tuple(sorted(stopped.items()))
        ),
        errors=st.dictionaries(
            st.sampled_from(["skipped", "deadLettered", "uncommittedReleases"]), st.integers(1, 10**9)
        ).map(lambda counts: tuple(sorted(counts.items()))),
    )
)
def test_a_lease_record_reads_back_the_same(record: LeaseRecord) -> None:
    assert lease_record(lease_record_annotations(record, "g-0")) == record


def test_a_hand_edited_lease_reads_unknown_numbers_and_states_as_absent() -> None:
    record = lease_record({"groupops.dev/epoch": "soon", "groupops.dev/state": "dancing"})
    assert record == LeaseRecord()


def test_a_malformed_stopped_note_reads_as_nothing_stopped() -> None:
    for note in ("[[", '{"a": 1}', '[["orders", -1, 5]]', '[["orders", 1]]'):
        assert lease_record({"groupops.dev/stopped": note}).stopped == ()


def test_the_fence_voids_holdings_through_the_epoch() -> None:
    assert lease_record(fence_annotations(12)).released_through == 12
    assert fence_annotations(12) == {LEASE_RELEASED_THROUGH_ANNOTATION: "12"}


def test_a_lease_renders_as_leader_election_writes_it() -> None:
    lease = render_lease(
        namespace="ns",
        policy="orders",
        identity="Orders_Processor-0",
        record=LeaseRecord(acked_epoch=3, partitions=(TopicPartition("t", 0),), state=LeaseState.ACTIVE),
        holder="Orders_Processor-0",
        duration_s=3,
        renew_time=1.25,
        acquire_time=0.0,
        transitions=2,
        resource_version="77",
    )
    assert lease["metadata"]["name"].startswith("orders-orders-processor-0-")
    assert lease["metadata"]["resourceVersion"] == "77"
    assert lease["metadata"]["annotations"]["groupops.dev/identity"] == "Orders_Processor-0"
    assert lease["spec"] == {
        "holderIdentity": "Orders_Processor-0",
        "leaseDurationSeconds": 3,
        "acquireTime": "1970-01-01T00:00:00.000000Z",
        "renewTime": "1970-01-01T00:00:01.250000Z",
        "leaseTransitions": 2,
    }


@given(st.floats(min_value=0, max_value=4 * 10**9, allow_nan=False))
def test_micro_time_keeps_microseconds(seconds: float) -> None:
    assert abs(parse_micro_time(format_micro_time(seconds)) - seconds) < 2e-6


def test_a_bad_time_is_refused() -> None:
    with pytest.raises(PlanFormatError, match="renewTime"):
        parse_micro_time("yesterday")
