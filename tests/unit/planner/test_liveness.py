"""The heartbeat datagrams and the grant rule (docs/design.md §7.5), and how a heard heartbeat
counts on the operator's `LeaseClock`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupops.consumer.progress import LATEST_VERDICT_S, REPORT_DECIMALS
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import (
    MAX_DATAGRAM,
    STUCK_GRACE_S,
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatFormatError,
    HeartbeatStatus,
    decode_answer,
    decode_heartbeat,
    encode_answer,
    encode_heartbeat,
    grant_refusal,
    parse_addresses,
    stuck_refusal,
)
from groupops.planner.plan_format import LeaseRecord

names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=60)


@given(
    namespace=names,
    lease=names,
    incarnation=names,
    seq=st.integers(0, 2**53),
    seen=st.none() | st.integers(-1, 2**31),
    progress=st.dictionaries(names, st.floats(0, 1e6), max_size=4),
)
def test_a_heartbeat_reads_back_as_it_was_sent(
    namespace: str, lease: str, incarnation: str, seq: int, seen: int | None, progress: dict[str, float]
) -> None:
    sent = Heartbeat(
        namespace=namespace, lease=lease, incarnation=incarnation, seq=seq, seen=seen, progress=progress
    )
    data = encode_heartbeat(sent)
    assert len(data) <= MAX_DATAGRAM
    received = decode_heartbeat(data)
    assert (received.namespace, received.lease, received.incarnation, received.seq, received.seen) == (
        namespace,
        lease,
        incarnation,
        seq,
        seen,
    )
    assert received.progress == pytest.approx({k: round(v, 3) for k, v in progress.items()})


@pytest.mark.parametrize(
    "answer",
    [
        HeartbeatAnswer(seq=4, status=HeartbeatStatus.GRANTED, valid=3.0),
        HeartbeatAnswer(seq=7, status=HeartbeatStatus.GRANTED, valid=3.0, spread=15.0),
        HeartbeatAnswer(seq=5, status=HeartbeatStatus.REFUSED, reason="fenced: re-read the Lease"),
        HeartbeatAnswer(seq=6, status=HeartbeatStatus.NOT_LEADER, leader="10.0.0.7:7946", reason="standby"),
    ],
)
def test_an_answer_reads_back_as_it_was_sent(answer: HeartbeatAnswer) -> None:
    assert decode_answer(encode_answer(answer)) == answer


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"v": 2, "seq": 1}', "version 2"),
        (b'{"v": 1, "namespace": "a", "lease": "b", "incarnation": "c"}', "seq"),
        (b'{"v": 1, "namespace": "", "lease": "b", "incarnation": "c", "seq": 1}', "namespace"),
        (b'{"v": 1, "namespace": "a", "lease": "b", "incarnation": "c", "seq": true}', "seq"),
        (b'{"v": 1, "namespace": "a", "lease": "b", "incarnation": "c", "seq": 1, "seen": "x"}', "seen"),
        (
            b'{"v": 1, "namespace": "a", "lease": "b", "incarnation": "c", "seq": 1, "progress": [1]}',
            "progress",
        ),
        (b"{" + b" " * MAX_DATAGRAM + b"}", "more than"),
    ],
)
def test_a_datagram_that_is_not_a_heartbeat_is_named_as_such(data: bytes, problem: str) -> None:
    with pytest.raises(HeartbeatFormatError, match=problem):
        decode_heartbeat(data)


@given(
    seq=st.integers(0, 2**63),
    valid=st.floats(0, 1e9, allow_nan=False, allow_infinity=False) | st.integers(0, 10**6),
    status=st.sampled_from(HeartbeatStatus),
    reason=st.sampled_from(["", "fenced: re-read the Lease"]),
    spread=st.just(0.0) | st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
)
def test_every_answer_is_the_json_object_of_its_fields(
    seq: int, valid: float, status: HeartbeatStatus, reason: str, spread: float
) -> None:
    """The granted answer is written without the JSON encoder (the answering process writes one
    per heartbeat): the same bytes the encoder writes, for every seq, validity and spread; a
    spread under 0.05 s is none, and the answer's bytes are then those of a leader without one."""
    answer = HeartbeatAnswer(seq=seq, status=status, valid=valid, reason=reason, spread=spread)
    body: dict[str, object] = {"v": 1, "seq": seq, "status": status.value}
    if status is HeartbeatStatus.GRANTED:
        body["valid"] = round(valid, 3)
        if round(spread, 1) > 0:
            body["spread"] = round(spread, 1)
    if reason:
        body["reason"] = reason
    assert encode_answer(answer) == json.dumps(body, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "value", [b"1e400", b"NaN", b"-Infinity", b"12345678901234567890123", b"true", b'"1"']
)
def test_a_progress_that_is_not_a_finite_exact_number_is_a_format_error(value: bytes) -> None:
    data = b'{"v": 1, "namespace": "a", "lease": "b", "incarnation": "c", "seq": 1, "progress": {"poll": %s}}'
    with pytest.raises(HeartbeatFormatError, match="progress"):
        decode_heartbeat(data % value)


def test_an_answer_with_an_unknown_status_or_a_negative_validity_or_spread_is_refused() -> None:
    with pytest.raises(HeartbeatFormatError, match="unknown status"):
        decode_answer(b'{"v": 1, "seq": 1, "status": "maybe"}')
    with pytest.raises(HeartbeatFormatError, match="valid"):
        decode_answer(b'{"v": 1, "seq": 1, "status": "granted", "valid": -1}')
    with pytest.raises(HeartbeatFormatError, match="spread"):
        decode_answer(b'{"v": 1, "seq": 1, "status": "granted", "valid": 3, "spread": -2}')
    with pytest.raises(HeartbeatFormatError, match="spread"):
        decode_answer(b'{"v": 1, "seq": 1, "status": "granted", "valid": 3, "spread": "15"}')


def _lease(holder: str | None = "worker-0") -> dict[str, object]:
    return {"spec": {"holderIdentity": holder} if holder else {}}


@pytest.mark.parametrize(
    ("lease", "record", "reason"),
    [
        (None, None, "no Lease"),
        (_lease(None), LeaseRecord(incarnation="a", heartbeats=True), "not held"),
        (_lease(), LeaseRecord(incarnation="b", heartbeats=True), "another process"),
        (_lease(), LeaseRecord(incarnation="a", heartbeats=False), "not in heartbeat mode"),
        (_lease(), LeaseRecord(incarnation="a", heartbeats=True, fenced_incarnation="a"), "fenced"),
        (_lease(), LeaseRecord(incarnation="a", heartbeats=True, fenced_incarnation="old"), None),
        (_lease(), LeaseRecord(incarnation="a", heartbeats=True), None),
    ],
)
def test_only_the_unfenced_holder_in_heartbeat_mode_is_granted(
    lease: dict[str, object] | None, record: LeaseRecord | None, reason: str | None
) -> None:
    refusal = grant_refusal(lease, record, "a")
    if reason is None:
        assert refusal is None
    else:
        assert refusal is not None and reason in refusal


def test_addresses_are_host_port_pairs() -> None:
    assert parse_addresses(" a.svc:7946, 10.0.0.1:1 ,") == ("a.svc:7946", "10.0.0.1:1")
    for bad in ("nohost", ":7946", "a:0", "a:70000", "a:x"):
        with pytest.raises(ValueError, match="host:port"):
            parse_addresses(bad)


A = MemberId("orders-worker-0")


def test_a_lease_is_silent_only_when_neither_its_version_nor_a_heartbeat_moved() -> None:
    clock = LeaseClock()
    clock.observe(A, "rv1", now=0.0, lifetime=4.0)
    clock.hear(A, now=3.0)
    assert not clock.expired(A, now=6.9, duration_s=4.0)
    assert clock.expired(A, now=7.0, duration_s=4.0)
    assert clock.next_expiry(after=0.0) == 7.0
    clock.hear(A, now=2.0)  # a late, older note never moves the moment back
    assert clock.heard_at(A) == 3.0
    clock.observe(A, "rv2", now=8.0, lifetime=4.0)  # a Lease write counts as well
    assert not clock.expired(A, now=11.9, duration_s=4.0)
    assert clock.next_expiry(after=7.0) == 12.0
    clock.forget(A)
    assert clock.heard_at(A) is None and clock.unchanged_for(A, now=20.0) is None


def test_a_heartbeat_with_progress_reads_back_small_and_rounded() -> None:
    sent = Heartbeat(
        namespace="team",
        lease="orders-processor-0",
        incarnation="0123456789abcdef0123456789abcdef",
        seq=41,
        seen=7,
        progress={"poll": 0.2, "advance": 12.3, "commit": 0.9},
    )
    data = encode_heartbeat(sent)
    assert len(data) < 200
    assert decode_heartbeat(data) == sent


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            HeartbeatAnswer(seq=3, status=HeartbeatStatus.REFUSED, reason="stuck", stuck=True), id="stuck"
        ),
        pytest.param(HeartbeatAnswer(seq=3, status=HeartbeatStatus.REFUSED, reason="fenced"), id="fenced"),
    ],
)
def test_a_refusal_as_stuck_reads_back_as_such(answer: HeartbeatAnswer) -> None:
    assert decode_answer(encode_answer(answer)) == answer


@pytest.mark.parametrize(
    ("progress", "interval", "refused"),
    [
        pytest.param({"poll": 9.1}, 6.0, True, id="loop-blocked"),
        pytest.param({"poll": 0.1, "advance": 9.5}, 6.0, True, id="no-advance-under-lag"),
        pytest.param({"poll": 6.5, "advance": 6.5}, 6.0, False, id="past-the-interval-within-the-grace"),
        pytest.param({"poll": 9.0, "advance": 9.0}, 6.0, False, id="at-the-end-of-the-grace"),
        pytest.param({"commit": 600.0}, 6.0, False, id="old-commit-alone"),
        pytest.param({"poll": 600.0}, None, False, id="interval-unknown"),
        pytest.param({}, 6.0, False, id="no-progress"),
    ],
)
def test_what_counts_as_stuck(progress: dict[str, float], interval: float | None, refused: bool) -> None:
    assert (stuck_refusal(progress, interval) is not None) is refused


def test_the_operator_judges_stuck_only_after_a_working_watchdog_would_have() -> None:
    # The replica's verdict names its own rule; the operator's refusal is the backstop. A
    # heartbeat's progress is rounded to REPORT_DECIMALS, so the grace must exceed that too.
    rounding = 10.0**-REPORT_DECIMALS
    assert LATEST_VERDICT_S + rounding < STUCK_GRACE_S
    assert stuck_refusal({"poll": 6.0 + LATEST_VERDICT_S + rounding}, 6.0) is None
