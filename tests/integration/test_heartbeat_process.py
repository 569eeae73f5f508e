"""The answering process (controller/heartbeat_process.py, docs/design.md §7.5): a real child
process and real UDP datagrams, its Lease mirror fed by hand as the operator's watch would.

- a standby's answerer (no leadership deadline yet) names the leader and grants nothing; a
  deadline in the past grants nothing either;
- a grant reaches the operator's clock of the policy, with its progress and its count;
- the fence guard asks the answerer: no fence right after a grant; once silent, a fence is
  allowed and the holder is refused until the mirror moves past both the version it showed and
  the one the fence was judged on (the mirror may lag the reconcile's cache);
- a failed fence lets the holder's heartbeats through again;
- reports applied late hold the operator's clock back: a granted replica is not judged silent;
- an answerer that dies is reported once, and the guard then says no (never fence blind);
- a port already taken fails the start with an error that names it.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from groupops.controller.heartbeat_process import FORWARD_FRACTION, HeartbeatProcess, HeartbeatProcessError
from groupops.controller.metrics import Metrics
from groupops.controller.names import LABEL_POLICY
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import (
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatStatus,
    decode_answer,
    encode_heartbeat,
)
from groupops.planner.plan_format import LeaseRecord, lease_record_annotations
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.integration

NS, POLICY, LEASE = "team", "orders", "orders-worker-0"
DURATION_S = 1


def lease(version: str, incarnation: str = "p1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": LEASE,
            "namespace": NS,
            "resourceVersion": version,
            "labels": {LABEL_POLICY: POLICY},
            "annotations": lease_record_annotations(
                LeaseRecord(incarnation=incarnation, heartbeats=True), "w"
            ),
        },
        "spec": {"holderIdentity": "worker-0", "leaseDurationSeconds": DURATION_S},
    }


class Replica:
    def __init__(self, port: int) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.settimeout(2.0)
        self.address = ("127.0.0.1", port)
        self.seq = 0

    def beat(self, incarnation: str = "p1", progress: dict[str, float] | None = None) -> HeartbeatAnswer:
        self.seq += 1
        heartbeat = Heartbeat(
            namespace=NS, lease=LEASE, incarnation=incarnation, seq=self.seq, progress=progress or {}
        )
        self.socket.sendto(encode_heartbeat(heartbeat), self.address)
        while True:
            answer = decode_answer(self.socket.recv(2048))
            if answer.seq == self.seq:
                return answer


@pytest.fixture
def answerer() -> Iterator[tuple[HeartbeatProcess, Metrics]]:
    metrics = Metrics()
    process = HeartbeatProcess("127.0.0.1", 0, metrics=metrics)
    yield process, metrics
    process.stop()


@pytest.fixture
def replica(answerer: tuple[HeartbeatProcess, Metrics]) -> Iterator[Replica]:
    replica = Replica(answerer[0].port)
    yield replica
    replica.socket.close()


def granted_count(metrics: Metrics) -> float:
    return (
        metrics.registry.get_sample_value("groupops_operator_heartbeats_total", {"answer": "granted"}) or 0.0
    )


def leading(process: HeartbeatProcess) -> LeaseClock:
    """The replica's Lease mirrored, its policy attached (the returned clock), and the process
    told it leads for good."""
    clock = LeaseClock()
    process.lease_event("ADDED", lease("1"))
    process.attach(NS, POLICY, clock)
    process.start_leadership(lambda: math.inf, lambda: None)
    return clock


def test_a_standby_or_an_expired_leader_grants_nothing(
    answerer: tuple[HeartbeatProcess, Metrics], replica: Replica
) -> None:
    process, _ = answerer
    process.lease_event("ADDED", lease("1"))
    process.attach(NS, POLICY, LeaseClock())
    assert replica.beat().status is HeartbeatStatus.NOT_LEADER
    process.start_leadership(lambda: time.monotonic() - 1.0, lambda: "10.0.0.9:7946")
    answer = wait_for("the leader named", lambda: (a := replica.beat()).leader and a, 5, interval=0.1)
    assert answer.status is HeartbeatStatus.NOT_LEADER and answer.leader == "10.0.0.9:7946"
    time.sleep(0.6)  # several deadlines pushed since, every one of them past
    assert replica.beat().status is HeartbeatStatus.NOT_LEADER


def test_a_grant_reaches_the_operators_clock_with_progress_and_count(
    answerer: tuple[HeartbeatProcess, Metrics], replica: Replica
) -> None:
    process, metrics = answerer
    clock = leading(process)
    wait_for("a grant", lambda: replica.beat().status is HeartbeatStatus.GRANTED, 5, interval=0.1)
    time.sleep(DURATION_S * FORWARD_FRACTION)  # grants reach the operator a quarter Lease apart
    sent = time.monotonic()
    answer = replica.beat(progress={"poll": 0.4})
    assert answer.status is HeartbeatStatus.GRANTED and answer.valid == pytest.approx(0.75 * DURATION_S)
    wait_for("the grant on the operator's clock", lambda: (clock.heard_at(MemberId(LEASE)) or 0) >= sent, 2)
    heard = wait_for("the progress", lambda: process.progress_of(NS, LEASE), 2)
    assert heard.progress == {"poll": 0.4} and heard.policy == POLICY
    wait_for("the count", lambda: granted_count(metrics) >= 2, 2)
    poll = {"namespace": NS, "policy": POLICY, "identity": "worker-0"}
    assert metrics.registry.get_sample_value("groupops_member_seconds_since_poll", poll) == 0.4


def test_max_poll_interval_reaches_the_answerer_on_each_change_and_again_after_a_detach(
    answerer: tuple[HeartbeatProcess, Metrics], replica: Replica
) -> None:
    process, _ = answerer
    attached = leading(process)
    stalled = {"poll": 30.0}  # beyond 1 s + the grace, within 100 s

    def answers(status: HeartbeatStatus) -> bool:
        answer = replica.beat(progress=stalled)
        return answer.status is status and answer.stuck is (status is HeartbeatStatus.REFUSED)

    wait_for("a grant", lambda: answers(HeartbeatStatus.GRANTED), 5, interval=0.1)
    process.note_max_poll_interval(NS, POLICY, 1.0)
    wait_for("refused as stuck", lambda: answers(HeartbeatStatus.REFUSED), 5, interval=0.1)
    process.note_max_poll_interval(NS, POLICY, 1.0)  # the same value again: nothing new to tell
    assert replica.beat(progress=stalled).stuck
    process.note_max_poll_interval(NS, POLICY, 100.0)
    wait_for("granted under the new limit", lambda: answers(HeartbeatStatus.GRANTED), 5, interval=0.1)
    process.note_max_poll_interval(NS, POLICY, 1.0)
    wait_for("refused again", lambda: answers(HeartbeatStatus.REFUSED), 5, interval=0.1)
    process.detach(NS, POLICY, LeaseClock())  # not the attached clock: ignored, the limit stays
    assert replica.beat(progress=stalled).stuck
    process.detach(NS, POLICY, attached)
    process.attach(NS, POLICY, LeaseClock())
    process.note_max_poll_interval(NS, POLICY, 1.0)  # the answerer forgot it at the detach
    wait_for("refused after the re-attach", lambda: answers(HeartbeatStatus.REFUSED), 5, interval=0.1)


def test_the_fence_guard_is_decided_by_the_answerer_and_holds_across_a_lagging_mirror(
    answerer: tuple[HeartbeatProcess, Metrics], replica: Replica
) -> None:
    process, _ = answerer
    process.lease_event("ADDED", lease("5"))
    process.attach(NS, POLICY, LeaseClock())
    process.start_leadership(lambda: math.inf, lambda: None)
    wait_for("a grant", lambda: replica.beat().status is HeartbeatStatus.GRANTED, 5, interval=0.1)

    def guard(version: str) -> bool:
        return process.may_fence(NS, POLICY, LEASE, incarnation="p1", version=version, duration_s=DURATION_S)

    assert not guard("6"), "heard just now: alive"
    time.sleep(DURATION_S + 0.1)
    # The reconcile judged version 6; the mirror still shows 5 (its watch event is on the way).
    assert guard("6")
    assert replica.beat().status is HeartbeatStatus.REFUSED, "refused while the mirror shows 5"
    process.lease_event("MODIFIED", lease("6"))
    assert replica.beat().status is HeartbeatStatus.REFUSED, "and while it shows the judged 6"
    process.fence_failed(NS, LEASE, version="6")
    # A command on the pipe, not an answer on the socket: the next grant follows it shortly.
    granted = lambda: replica.beat().status is HeartbeatStatus.GRANTED  # noqa: E731
    wait_for("a grant once the fence did not land", granted, 5, interval=0.1)


def test_reports_applied_late_hold_the_clock_back_instead_of_judging_a_granted_replica_silent(
    answerer: tuple[HeartbeatProcess, Metrics], replica: Replica
) -> None:
    """The operator applies the answerer's reports late (a starved process: here its apply is
    held for 2.5 Leases) while the replica keeps being granted. The operator's clock then holds
    its judgement at the last report it applied instead of judging the replica silent; once the
    reports are in it has the grants; a replica that really stops is judged expired."""
    process, metrics = answerer
    clock = leading(process)
    holder = MemberId(LEASE)
    wait_for("a grant", lambda: replica.beat().status is HeartbeatStatus.GRANTED, 5, interval=0.1)
    wait_for("the grant on the clock", lambda: clock.heard_at(holder) is not None, 2)
    with process._lock:  # the report receiver blocks in its apply, as a starved one would
        held_from = time.monotonic()
        while time.monotonic() - held_from < 2.5 * DURATION_S:
            assert replica.beat().status is HeartbeatStatus.GRANTED
            time.sleep(0.1)
        now = time.monotonic()
        last_heard = clock.heard_at(holder)
        assert last_heard is not None and now - last_heard > DURATION_S, "the fault: grants not applied"
        assert not clock.expired(holder, now, DURATION_S)
    granted_again = time.monotonic()
    replica.beat()
    wait_for("the late grants applied", lambda: (clock.heard_at(holder) or 0) >= granted_again - 0.5, 2)
    assert not clock.expired(holder, time.monotonic(), DURATION_S)
    slow = metrics.registry.get_sample_value(
        "groupops_operator_heartbeat_report_delay_seconds_bucket", {"le": "1.0"}
    )
    every = metrics.registry.get_sample_value("groupops_operator_heartbeat_report_delay_seconds_count")
    assert every is not None and slow is not None and every > slow, "the held reports counted as late"
    # No more heartbeats since `granted_again`: silent for real. The clock has the grants a
    # quarter Lease apart (forwarding), the last one 0.1 s before that beat at the earliest.
    wait_for("judged expired", lambda: clock.expired(holder, time.monotonic(), DURATION_S), 3, interval=0.05)
    assert time.monotonic() - granted_again >= DURATION_S * (1 - FORWARD_FRACTION) - 0.1
    # The answerer's own lateness crosses with the reports: one socket wait per burst it read.
    waits = metrics.registry.get_sample_value("groupops_operator_heartbeat_socket_wait_seconds_count")
    assert waits is not None and waits >= 1


def test_a_dead_answerer_is_reported_once_and_the_guard_never_fences_blind(
    answerer: tuple[HeartbeatProcess, Metrics],
) -> None:
    process, _ = answerer
    lost: list[str] = []
    process.on_lost = lost.append
    pid = process._process.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for("the loss reported", lambda: lost, 5)
    assert not process.may_fence(NS, POLICY, LEASE, incarnation="p1", version="1", duration_s=DURATION_S)
    assert len(lost) == 1 and "exited" in lost[0]


def test_a_taken_port_is_a_startup_error_that_names_it() -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        with pytest.raises(HeartbeatProcessError, match=f"--heartbeat-port {port}"):
            HeartbeatProcess("127.0.0.1", port)
    finally:
        taken.close()
