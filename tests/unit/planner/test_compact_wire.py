"""The two forms of a partition set on the wire: small sets keep the legacy bytes earlier versions
wrote, large ones turn compact, both read back as the sorted set, and malformed compact text is
refused with the key named. The same for a plan's data and for the pending releases."""

from __future__ import annotations

import json
from collections.abc import Iterable
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner import plan_format, wire
from groupops.planner.plan_format import (
    RELEASING_ANNOTATION,
    PlanFormatError,
    PublishedPlan,
    Release,
    plan_from_configmap,
    plan_to_configmap,
)
from groupops.planner.wire import (
    NOTE_LEGACY_LIMIT_BYTES,
    PLAN_LEGACY_LIMIT_BYTES,
    decode_partitions,
    decode_plan,
    encode_partitions,
    encode_plan,
)


def legacy_encode(partitions: Iterable[TopicPartition]) -> str:
    """`encode_partitions` as it was before the compact form (the reference for byte identity)."""
    return json.dumps([[tp.topic, tp.partition] for tp in sorted(partitions)], separators=(",", ":"))


topics = st.sampled_from(["orders", "refunds", "a.b_c-d", "Ünïcode", 'quo"te'])
single = st.builds(TopicPartition, topics, st.integers(min_value=0, max_value=2**31 - 1))


@st.composite
def partition_sets(draw: st.DrawFn) -> list[TopicPartition]:
    """Scattered partitions plus runs long enough to cross NOTE_LEGACY_LIMIT_BYTES, in any order,
    with repeats."""
    result = draw(st.lists(single, max_size=40))
    for topic, start, length in draw(
        st.lists(st.tuples(topics, st.integers(0, 10**6), st.integers(1, 3000)), max_size=3)
    ):
        result.extend(TopicPartition(topic, p) for p in range(start, start + length))
    if result and draw(st.booleans()):
        result.extend(result[: draw(st.integers(1, len(result)))])
    return draw(st.permutations(result))


@settings(max_examples=150)
@given(partition_sets(), st.sampled_from([0, NOTE_LEGACY_LIMIT_BYTES]))
def test_a_set_reads_back_sorted_without_repeats_in_either_form(
    partitions: list[TopicPartition], legacy_limit: int
) -> None:
    text = encode_partitions(partitions, legacy_limit=legacy_limit)
    assert decode_partitions(text, key="g-0") == tuple(sorted(set(partitions)))


@settings(max_examples=150)
@given(partition_sets())
def test_a_small_set_keeps_the_legacy_bytes_and_a_large_one_turns_compact(
    partitions: list[TopicPartition],
) -> None:
    legacy = legacy_encode(set(partitions))
    text = encode_partitions(partitions)
    if len(legacy) <= NOTE_LEGACY_LIMIT_BYTES:
        assert text == legacy
    else:
        assert text.startswith('{"v":2,"t":{')
        assert len(text) < len(legacy)


@given(st.lists(single, unique=True))
def test_the_legacy_form_still_reads(partitions: list[TopicPartition]) -> None:
    assert decode_partitions(legacy_encode(partitions), key="g-0") == tuple(sorted(partitions))


@pytest.mark.parametrize(
    ("partitions", "compact"),
    [
        pytest.param([], '{"v":2,"t":{}}', id="nothing"),
        pytest.param([0], '{"v":2,"t":{"orders":[0]}}', id="one partition"),
        pytest.param([3, 4], '{"v":2,"t":{"orders":[3,4]}}', id="two in a row stay ints"),
        pytest.param([3, 4, 5], '{"v":2,"t":{"orders":[[3,5]]}}', id="three in a row are a run"),
        pytest.param([0, 3, 4, 5, 6, 7, 9], '{"v":2,"t":{"orders":[0,[3,7],9]}}', id="runs and singles"),
    ],
)
def test_the_compact_form_is_runs_per_topic(partitions: list[int], compact: str) -> None:
    text = encode_partitions([TopicPartition("orders", p) for p in partitions], legacy_limit=0)
    assert text == compact


def test_the_compact_form_begins_just_beyond_the_threshold() -> None:
    def orders(count: int) -> list[TopicPartition]:
        return [TopicPartition("orders", 2 * p) for p in range(count)]

    count = next(n for n in range(1500, 5000) if len(legacy_encode(orders(n))) > NOTE_LEGACY_LIMIT_BYTES)
    assert encode_partitions(orders(count - 1)) == legacy_encode(orders(count - 1))
    assert encode_partitions(orders(count)).startswith('{"v":2,')


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param('"orders"', "expected a list", id="a string"),
        pytest.param('{"v":2}', '"v" and "t"', id="no topics"),
        pytest.param('{"v":2,"t":{},"x":1}', '"v" and "t"', id="an unknown key"),
        pytest.param('{"v":3,"t":{}}', "version 3", id="a newer version"),
        pytest.param('{"v":true,"t":{}}', "version True", id="a boolean version"),
        pytest.param('{"v":2,"t":[]}', "topic -> partitions", id="topics not an object"),
        pytest.param('{"v":2,"t":{"o":[]}}', "non-empty", id="a topic without partitions"),
        pytest.param('{"v":2,"t":{"o":[-1]}}', "partition id", id="a negative partition"),
        pytest.param('{"v":2,"t":{"o":[[-2,1]]}}', "partition id", id="a negative run"),
        pytest.param('{"v":2,"t":{"o":[2147483648]}}', "partition id", id="beyond int32"),
        pytest.param('{"v":2,"t":{"o":[1.0]}}', "partition id", id="a float"),
        pytest.param('{"v":2,"t":{"o":[true]}}', "partition id", id="a boolean"),
        pytest.param('{"v":2,"t":{"o":[[1,2,3]]}}', "[lo, hi]", id="a run of three numbers"),
        pytest.param('{"v":2,"t":{"o":[[7,3]]}}', "lo > hi", id="a run backwards"),
        pytest.param('{"v":2,"t":{"o":[[0,5],3]}}', "overlaps", id="overlapping entries"),
        pytest.param('{"v":2,"t":{"o":[3,3]}}', "overlaps", id="a repeated partition"),
        pytest.param('{"v":2,"t":{"o":[5,3]}}', "precedes", id="descending entries"),
        pytest.param('{"v":2,"t":{"o":[0],"o":[1]}}', "appears twice", id="a topic twice"),
        pytest.param('{"v":2,"t":{"o":[[0,2147483647]]}}', "too many partitions", id="a run too long"),
        pytest.param('{"v":2,"t":{"o":[1]', "not JSON", id="cut short"),
    ],
)
def test_malformed_text_is_refused_with_the_key_named(text: str, complaint: str) -> None:
    with pytest.raises(PlanFormatError, match=r"\(orders-processor-3\)$") as caught:
        decode_partitions(text, key="orders-processor-3")
    assert caught.value.key == "orders-processor-3"
    assert complaint in str(caught.value)


def _plan(sizes: list[int]) -> Plan:
    """Identities owning every other partition of one topic, `sizes[i]` for identity i."""
    start = 0
    assignment: dict[MemberId, tuple[TopicPartition, ...]] = {}
    for i, size in enumerate(sizes):
        assignment[MemberId(f"orders-processor-{i}")] = tuple(
            TopicPartition("orders", 2 * p) for p in range(start, start + size)
        )
        start += size
    return Plan(epoch=9, strategy="lag", assignment=assignment)


def test_a_plan_within_its_legacy_limit_keeps_the_legacy_bytes_even_for_a_large_entry() -> None:
    plan = _plan([3000, 500, 0])
    data = encode_plan(plan)
    assert sum(len(v) for k, v in data.items() if k not in ("epoch", "strategy")) <= PLAN_LEGACY_LIMIT_BYTES
    for identity, partitions in plan.assignment.items():
        assert data[identity] == legacy_encode(partitions)
    big = plan.assignment[MemberId("orders-processor-0")]
    assert encode_partitions(big).startswith('{"v":2,'), "its Lease note is compact all the same"
    assert decode_plan(data) == plan


def test_a_plan_beyond_its_legacy_limit_is_compact_in_every_entry() -> None:
    plan = _plan([20_000, 20_000, 10])
    data = encode_plan(plan)
    assert all(data[identity].startswith('{"v":2,') for identity in plan.assignment)
    assert decode_plan(data) == plan


topic_partitions = st.builds(TopicPartition, topics, st.integers(min_value=0, max_value=300))
identities = st.integers(min_value=0, max_value=5).map(lambda i: MemberId(f"orders-processor-{i}"))


@settings(max_examples=150)
@given(
    st.dictionaries(
        topic_partitions,
        st.builds(Release, identity=identities, epoch=st.integers(0, 3), since=st.sampled_from([0.0, 12.5])),
        max_size=200,
    ),
    st.sampled_from([0, plan_format.RELEASING_LEGACY_LIMIT_BYTES]),
)
def test_pending_releases_read_back_in_either_form(
    releasing: dict[TopicPartition, Release], legacy_limit: int
) -> None:
    published = PublishedPlan(plan=Plan(epoch=4, strategy="lag", assignment={}), releasing=releasing)
    with mock.patch.object(plan_format, "RELEASING_LEGACY_LIMIT_BYTES", legacy_limit):
        parts = plan_to_configmap(published)
    assert parts["annotations"][RELEASING_ANNOTATION].startswith("[" if legacy_limit else '{"v":2,')
    assert plan_from_configmap(parts["data"], parts["annotations"]) == published


def test_compact_releases_name_each_group_once() -> None:
    first, second = (
        Release(identity=MemberId("g-1"), epoch=7, since=12.5),
        Release(identity=MemberId("g-2"), epoch=7),
    )
    releasing = {TopicPartition("orders", p): first for p in (0, 3, 4, 5, 6, 7)} | {
        TopicPartition("orders", 9): second
    }
    published = PublishedPlan(plan=Plan(epoch=8, strategy="lag", assignment={}), releasing=releasing)
    with mock.patch.object(plan_format, "RELEASING_LEGACY_LIMIT_BYTES", 0):
        annotation = plan_to_configmap(published)["annotations"][RELEASING_ANNOTATION]
    assert annotation == '{"v":2,"g":[["g-1",7,12.5],["g-2",7,0.0]],"t":{"orders":[[0,[0,[3,7]]],[1,[9]]]}}'


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param('{"v":2,"g":[],"t":{}', "not JSON", id="cut short"),
        pytest.param('{"v":2,"t":{}}', '"v", "g" and "t"', id="no groups"),
        pytest.param('{"v":9,"g":[],"t":{}}', "version 9", id="a newer version"),
        pytest.param('{"v":2,"g":[["g-1",-1,0]],"t":{}}', "[identity, epoch, since]", id="a negative epoch"),
        pytest.param('{"v":2,"g":[["g-1",1,0]],"t":{"o":[[1,[0]]]}}', "group < 1", id="no such group"),
        pytest.param('{"v":2,"g":[["g-1",1,0]],"t":{"o":[]}}', "non-empty", id="a topic without groups"),
        pytest.param(
            '{"v":2,"g":[["g-1",1,0],["g-2",1,0]],"t":{"o":[[1,[0]],[0,[1]]]}}',
            "out of order",
            id="groups backwards",
        ),
        pytest.param(
            '{"v":2,"g":[["g-1",1,0],["g-2",1,0]],"t":{"o":[[0,[[0,4]]],[1,[4]]]}}',
            "pending release twice",
            id="one partition in two groups",
        ),
        pytest.param('{"v":2,"g":[["g-1",1,0]],"t":{"o":[[0,[[4,2]]]]}}', "lo > hi", id="a run backwards"),
    ],
)
def test_malformed_compact_releases_are_refused_with_the_annotation_named(text: str, complaint: str) -> None:
    with pytest.raises(PlanFormatError) as caught:
        plan_from_configmap({"epoch": "1"}, {RELEASING_ANNOTATION: text})
    assert caught.value.key == RELEASING_ANNOTATION
    assert complaint in str(caught.value)


def test_the_public_surface_is_listed() -> None:
    assert {"NOTE_LEGACY_LIMIT_BYTES", "PLAN_LEGACY_LIMIT_BYTES", "topic_runs", "parse_json"} <= set(
        wire.__all__
    )
    assert "RELEASING_LEGACY_LIMIT_BYTES" in plan_format.__all__
