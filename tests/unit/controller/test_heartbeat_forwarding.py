"""What the answering process forwards to the operator (controller/heartbeat_process.py, design
§7.5 "the answerer forwards"): every replica's grants, a quarter of its Lease apart at most, so
that the operator's clock is never behind by more than half a Lease; its progress every 2 s,
at once when the holder changed; all of it as plain data across the pipe."""

from __future__ import annotations

import pickle
import time
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from groupops.controller.heartbeat_process import (
    FORWARD_FRACTION,
    PROGRESS_EVERY_S,
    _Outbox,
    _RecordingClock,
    _Reported,
)
from groupops.controller.heartbeats import HeardProgress
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock

NS, POLICY = "team", "orders"


def lease_of(duration: float) -> dict[str, Any]:
    return {"metadata": {"name": "orders-0", "namespace": NS}, "spec": {"leaseDurationSeconds": duration}}


def forwarded(outbox: _Outbox) -> dict[tuple[str, str, str], float]:
    return _Reported.from_wire(pickle.loads(pickle.dumps(outbox.take().wire()))).heard


@given(
    duration=st.integers(1, 60),
    gaps=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=200),
)
def test_the_operators_clock_is_never_half_a_lease_behind_the_answerers(
    duration: int, gaps: list[float]
) -> None:
    """Heartbeats a quarter of the Lease apart at most (the replica's interval); after each one
    the operator's clock, fed only by what was forwarded, is within half the duration of the
    answerer's own, which heard every grant."""
    outbox = _Outbox()
    clock = _RecordingClock((NS, POLICY), outbox, lambda ns, name: lease_of(duration))
    operators = LeaseClock()
    now = 1000.0
    for gap in gaps:
        now += gap * duration / 4
        clock.hear(MemberId("orders-0"), now)
        for (_, _, lease), moment in forwarded(outbox).items():
            operators.hear(MemberId(lease), moment)
        answerers, theirs = clock.heard_at(MemberId("orders-0")), operators.heard_at(MemberId("orders-0"))
        assert answerers == now
        assert theirs is not None and answerers - theirs < duration / 2


def test_a_grant_goes_out_at_once_then_a_quarter_lease_apart_and_at_once_after_a_detach() -> None:
    outbox = _Outbox()
    clock = _RecordingClock((NS, POLICY), outbox, lambda ns, name: lease_of(8))
    key = (NS, POLICY, "orders-0")
    clock.hear(MemberId("orders-0"), 100.0)
    assert forwarded(outbox) == {key: 100.0}  # the first grant: at once
    clock.hear(MemberId("orders-0"), 101.0)
    assert forwarded(outbox) == {}  # 1 s later: within 8 s x 0.25
    clock.hear(MemberId("orders-0"), 100.0 + 8 * FORWARD_FRACTION)
    assert forwarded(outbox) == {key: 102.0}
    outbox.forget(NS, POLICY)
    clock.hear(MemberId("orders-0"), 102.5)
    assert forwarded(outbox) == {key: 102.5}  # a re-attached policy's clock starts empty


def test_a_lease_the_answerer_cannot_read_forwards_every_grant() -> None:
    outbox = _Outbox()
    clock = _RecordingClock((NS, POLICY), outbox, lambda ns, name: None)
    for moment in (100.0, 100.1, 100.2):
        clock.hear(MemberId("orders-0"), moment)
        assert forwarded(outbox) == {(NS, POLICY, "orders-0"): moment}


def test_progress_goes_out_every_two_seconds_and_at_once_for_a_new_holder() -> None:
    outbox = _Outbox()

    def progress(holder: str, at: float, poll: float) -> dict[tuple[str, str], Any]:
        outbox.progressed(NS, "orders-0", holder, HeardProgress({"poll": poll}, at, POLICY))
        return _Reported.from_wire(pickle.loads(pickle.dumps(outbox.take().wire()))).progress

    assert progress("worker-0", 500.0, 0.1) == {(NS, "orders-0"): ("worker-0", {"poll": 0.1}, 500.0, POLICY)}
    assert progress("worker-0", 501.0, 0.2) == {}
    assert progress("worker-1", 501.5, 0.3) == {(NS, "orders-0"): ("worker-1", {"poll": 0.3}, 501.5, POLICY)}
    assert progress("worker-1", 501.5 + PROGRESS_EVERY_S, 7.0) == {
        (NS, "orders-0"): ("worker-1", {"poll": 7.0}, 501.5 + PROGRESS_EVERY_S, POLICY)
    }


def test_every_report_carries_the_moment_it_was_taken_and_goes_out_empty_too() -> None:
    """The operator's clocks judge silence only up to the last report applied (design §7.5), so
    a report carries when it was taken, after every grant recorded before it, and an empty one
    still moves the operator's horizon."""
    outbox = _Outbox()
    clock = _RecordingClock((NS, POLICY), outbox, lambda ns, name: lease_of(8))
    before = time.monotonic()
    clock.hear(MemberId("orders-0"), before)
    report = _Reported.from_wire(pickle.loads(pickle.dumps(outbox.take().wire())))
    assert report.heard == {(NS, POLICY, "orders-0"): before}
    assert report.sent_at >= before
    empty = _Reported.from_wire(pickle.loads(pickle.dumps(outbox.take().wire())))
    assert not empty.heard and not empty.progress and not empty.answered
    assert empty.sent_at >= report.sent_at
