"""The operator's heartbeat book (controller/heartbeats.py): who is granted, and the fence guard
that makes "judged silent" and "granted" exclusive."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from groupops.controller import heartbeats
from groupops.controller.heartbeats import GRANT_FRACTION, HeartbeatBook, HeartbeatServer
from groupops.controller.metrics import Metrics
from groupops.controller.names import LABEL_POLICY
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import (
    STUCK_GRACE_S,
    Heartbeat,
    HeartbeatStatus,
    decode_answer,
    encode_heartbeat,
)
from groupops.planner.plan_format import LeaseRecord, fence_annotations, lease_record_annotations

NS, POLICY, LEASE = "team", "orders", "orders-worker-0"


class World:
    def __init__(self) -> None:
        self.now = 100.0
        self.leading = True
        self.lease: dict[str, Any] | None = self.lease_object(
            "rv1", LeaseRecord(incarnation="p1", heartbeats=True)
        )
        self.book = HeartbeatBook(
            leases=lambda ns, name: self.lease if (ns, name) == (NS, LEASE) else None,
            leading=lambda: self.leading,
            leader_address=lambda: "10.0.0.9:7946",
            clock=lambda: self.now,
        )
        self.clock = LeaseClock()
        self.book.attach(NS, POLICY, self.clock)

    @staticmethod
    def lease_object(version: str, record: LeaseRecord, holder: str = "worker-0") -> dict[str, Any]:
        return {
            "metadata": {
                "name": LEASE,
                "resourceVersion": version,
                "labels": {LABEL_POLICY: POLICY},
                "annotations": lease_record_annotations(record, "worker-0"),
            },
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 4},
        }

    def beat(self, incarnation: str = "p1", seen: int | None = None) -> HeartbeatStatus:
        heartbeat = Heartbeat(namespace=NS, lease=LEASE, incarnation=incarnation, seq=1, seen=seen)
        return self.book.answer(heartbeat).status

    def may_fence(self) -> bool:
        """The fence guard for p1's Lease as judged on version rv1, with the Lease's 4 s."""
        return self.book.may_fence(NS, POLICY, LEASE, incarnation="p1", version="rv1", duration_s=4.0)


def test_a_grant_is_noted_on_the_policy_clock_with_three_quarters_of_the_lease() -> None:
    world = World()
    answer = world.book.answer(Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=9))
    assert answer.status is HeartbeatStatus.GRANTED and answer.seq == 9
    assert answer.valid == GRANT_FRACTION * 4
    assert world.clock.heard_at(MemberId(LEASE)) == 100.0


def test_a_standby_names_the_leader_and_grants_nothing() -> None:
    world = World()
    world.leading = False
    answer = world.book.answer(Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=1))
    assert answer.status is HeartbeatStatus.NOT_LEADER and answer.leader == "10.0.0.9:7946"
    assert world.clock.heard_at(MemberId(LEASE)) is None


def test_another_process_or_a_missing_lease_are_refused() -> None:
    world = World()
    assert world.beat("p2") is HeartbeatStatus.REFUSED
    world.lease = None
    assert world.beat() is HeartbeatStatus.REFUSED
    assert world.clock.heard_at(MemberId(LEASE)) is None


def test_a_new_leader_grants_before_the_policy_runs_and_its_clock_hears_that_grant_on_attach() -> None:
    world = World()
    world.book.detach(NS, POLICY, world.clock)  # as a leader that does not run the policy yet
    assert world.beat() is HeartbeatStatus.GRANTED
    assert world.clock.heard_at(MemberId(LEASE)) is None
    world.now += 1.0
    # A daemon that started after the grant heard the Lease later than it: the later moment stays.
    started_after = LeaseClock()
    started_after.hear(MemberId(LEASE), world.now - 0.5)
    world.book.attach(NS, POLICY, started_after)
    assert started_after.heard_at(MemberId(LEASE)) == world.now - 0.5
    # A clock that heard nothing gets the grant given before its attach.
    fresh = LeaseClock()
    world.book.detach(NS, POLICY, started_after)
    assert world.beat() is HeartbeatStatus.GRANTED  # at 101.0
    world.book.attach(NS, POLICY, fresh)
    assert fresh.heard_at(MemberId(LEASE)) == 101.0
    assert world.beat() is HeartbeatStatus.GRANTED  # attached: heard at once, as before
    world.now += 2.0
    assert world.beat() is HeartbeatStatus.GRANTED
    assert fresh.heard_at(MemberId(LEASE)) == 103.0


def test_a_grant_given_before_the_policy_runs_holds_off_the_fence_guard() -> None:
    world = World()
    world.book.detach(NS, POLICY, world.clock)
    assert world.beat() is HeartbeatStatus.GRANTED
    world.now += 3.5
    assert not world.may_fence()
    world.now += 1.0
    assert world.may_fence()
    assert world.beat() is HeartbeatStatus.REFUSED


def test_the_fence_guard_and_a_grant_exclude_each_other() -> None:
    world = World()
    assert world.beat() is HeartbeatStatus.GRANTED
    world.now += 3.0
    assert not world.may_fence()
    world.now += 1.5
    assert world.may_fence()
    # The cache still shows the version the fence was judged on: no grant until it moves on.
    assert world.beat() is HeartbeatStatus.REFUSED
    # The fence landed: the Lease names the fenced incarnation.
    world.lease = World.lease_object("rv2", LeaseRecord(incarnation="p1", heartbeats=True))
    world.lease["metadata"]["annotations"].update(fence_annotations(3, "p1"))
    assert world.beat() is HeartbeatStatus.REFUSED
    # The replica acknowledged the fence with its own write: granted again.
    world.lease = World.lease_object(
        "rv3", LeaseRecord(incarnation="p1", heartbeats=True, released_through=3)
    )
    assert world.beat() is HeartbeatStatus.GRANTED


def test_a_fence_that_lost_its_compare_and_swap_lifts_the_refusal() -> None:
    world = World()
    world.now += 10
    assert world.may_fence()
    world.book.fence_failed(NS, LEASE, version="rv0")  # another judgement's: not ours to lift
    assert world.beat() is HeartbeatStatus.REFUSED
    world.book.fence_failed(NS, LEASE, version="rv1")
    assert world.beat() is HeartbeatStatus.GRANTED


def test_a_replica_that_has_not_seen_a_plan_for_a_lease_duration_is_refused() -> None:
    world = World()
    world.book.note_published(NS, POLICY, 5)
    assert world.beat(seen=4) is HeartbeatStatus.GRANTED, "a plan just published: it may not have arrived"
    world.now += 4.5
    world.book.note_published(NS, POLICY, 5)  # noting the same epoch again keeps its first moment
    assert world.beat(seen=4) is HeartbeatStatus.REFUSED
    assert world.beat(seen=5) is HeartbeatStatus.GRANTED
    assert world.beat(seen=None) is HeartbeatStatus.GRANTED, "native replicas follow no plan"


def progressing(poll: float, advance: float | None = None) -> Heartbeat:
    progress = {"poll": poll, "commit": 0.4}
    if advance is not None:
        progress["advance"] = advance
    return Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=1, progress=progress)


def test_progress_beyond_the_max_poll_interval_is_refused_as_stuck_and_not_heard() -> None:
    world = World()
    world.book.note_max_poll_interval(NS, POLICY, 6)
    within_grace = 6 + STUCK_GRACE_S
    assert world.book.answer(progressing(poll=6.5, advance=within_grace)).status is HeartbeatStatus.GRANTED
    heard = world.clock.heard_at(MemberId(LEASE))
    world.now += 1.0
    for stuck in (progressing(poll=within_grace + 0.1), progressing(poll=0.2, advance=10.5)):
        answer = world.book.answer(stuck)
        assert answer.status is HeartbeatStatus.REFUSED and answer.stuck, answer
        assert "maxPollIntervalSeconds 6" in answer.reason
    assert world.clock.heard_at(MemberId(LEASE)) == heard, "a stuck replica is silent for the fence"
    shown = world.book.progress_of(NS, LEASE)
    assert shown is not None and shown.progress == {"poll": 0.2, "advance": 10.5, "commit": 0.4}


def test_stuck_refusals_are_counted_apart_from_other_refusals() -> None:
    world = World()
    metrics = Metrics()
    world.book = HeartbeatBook(
        leases=lambda ns, name: world.lease if (ns, name) == (NS, LEASE) else None,
        leading=lambda: world.leading,
        leader_address=lambda: "10.0.0.9:7946",
        clock=lambda: world.now,
        metrics=metrics,
    )
    world.book.attach(NS, POLICY, world.clock)
    world.book.note_max_poll_interval(NS, POLICY, 6)
    assert world.book.answer(progressing(poll=6 + STUCK_GRACE_S + 1)).stuck

    def counted(answer: str) -> float | None:
        return metrics.registry.get_sample_value("groupops_operator_heartbeats_total", {"answer": answer})

    assert (counted("refused-stuck"), counted("refused")) == (1.0, None)


def test_without_a_known_interval_or_progress_nothing_is_refused_as_stuck() -> None:
    world = World()
    answer = world.book.answer(progressing(poll=10_000.0))
    assert answer.status is HeartbeatStatus.GRANTED and not answer.stuck
    world.book.note_max_poll_interval(NS, POLICY, 6)
    assert world.beat() is HeartbeatStatus.GRANTED, "a heartbeat without progress is judged as before"


def test_a_fenced_replica_is_refused_as_fenced_not_as_stuck() -> None:
    world = World()
    world.book.note_max_poll_interval(NS, POLICY, 6)
    world.lease = World.lease_object("rv2", LeaseRecord(incarnation="p1", heartbeats=True))
    world.lease["metadata"]["annotations"].update(fence_annotations(3, "p1"))
    answer = world.book.answer(progressing(poll=60.0))
    assert answer.status is HeartbeatStatus.REFUSED and not answer.stuck


def test_progress_is_forgotten_with_the_policy() -> None:
    world = World()
    world.book.answer(progressing(poll=0.3))
    assert world.book.progress_of(NS, LEASE) is not None
    world.book.detach(NS, POLICY, world.clock)
    assert world.book.progress_of(NS, LEASE) is None


def test_each_version_of_the_lease_is_read_for_what_it_says_not_for_what_an_older_one_said() -> None:
    world = World()
    assert world.beat() is HeartbeatStatus.GRANTED
    fenced = World.lease_object("rv2", LeaseRecord(incarnation="p1", heartbeats=True))
    fenced["metadata"]["annotations"].update(fence_annotations(3, "p1"))
    world.lease = fenced
    assert world.beat() is HeartbeatStatus.REFUSED, "a new version is read again"
    world.lease = World.lease_object("rv3", LeaseRecord(incarnation="p2", heartbeats=True))
    assert world.beat("p2") is HeartbeatStatus.GRANTED
    assert world.beat("p1") is HeartbeatStatus.REFUSED
    world.lease = None
    assert world.beat("p2") is HeartbeatStatus.REFUSED
    world.lease = World.lease_object("rv3", LeaseRecord(incarnation="p3", heartbeats=True))
    assert world.beat("p3") is HeartbeatStatus.GRANTED, "a Lease that was gone is read afresh"


def test_a_lease_without_a_resource_version_is_read_at_every_heartbeat() -> None:
    world = World()
    del world.lease["metadata"]["resourceVersion"]
    assert world.beat() is HeartbeatStatus.GRANTED
    world.lease["metadata"]["annotations"].update(fence_annotations(3, "p1"))
    assert world.beat() is HeartbeatStatus.REFUSED


def test_a_lease_changed_in_place_with_a_new_version_is_read_again() -> None:
    world = World()
    assert world.beat("p1") is HeartbeatStatus.GRANTED
    assert world.lease is not None
    taken = World.lease_object("rv2", LeaseRecord(incarnation="p2", heartbeats=True), holder="worker-0b")
    world.lease["metadata"].update(taken["metadata"])  # the same object, as a cache may update it
    world.lease["spec"].update(taken["spec"])
    assert world.beat("p1") is HeartbeatStatus.REFUSED, "the old holder is refused at once"
    assert world.beat("p2") is HeartbeatStatus.GRANTED
    assert world.beat("p1") is HeartbeatStatus.REFUSED, "asked in turn, each process gets its own answer"


def test_a_malformed_lease_is_refused_with_its_reason_until_a_new_version_mends_it() -> None:
    world = World()
    assert world.lease is not None
    for key in world.lease["metadata"]["annotations"]:
        if key.endswith("partitions"):
            world.lease["metadata"]["annotations"][key] = "not json"
    world.lease["metadata"]["resourceVersion"] = "rv2"
    answer = world.book.answer(Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=1))
    assert answer.status is HeartbeatStatus.REFUSED and "malformed" in answer.reason
    world.lease = World.lease_object("rv3", LeaseRecord(incarnation="p1", heartbeats=True))
    assert world.beat() is HeartbeatStatus.GRANTED


def test_the_server_answers_every_heartbeat_of_a_burst_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeats, "_BURST", 4)  # one wake-up cannot drain the burst
    world = World()
    server = HeartbeatServer(world.book, "127.0.0.1", 0)
    server.start()
    replica = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replica.settimeout(5)
    try:
        burst = 50
        for seq in range(burst):
            heartbeat = Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=seq)
            replica.sendto(encode_heartbeat(heartbeat), ("127.0.0.1", server.port))
        replica.sendto(b"not json", ("127.0.0.1", server.port))
        answers = [decode_answer(replica.recv(2048)) for _ in range(burst)]
        assert sorted(a.seq for a in answers) == list(range(burst))
        assert {a.status for a in answers} == {HeartbeatStatus.GRANTED}
    finally:
        server.stop()
        replica.close()
    assert not server._thread.is_alive()


def test_the_time_a_heartbeat_waited_in_the_socket_is_measured_from_the_kernels_receive_time() -> None:
    metrics = Metrics()
    world = World()
    server = HeartbeatServer(world.book, "127.0.0.1", 0, metrics=metrics)
    replica = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    replica.settimeout(5)
    unread_s = 0.4
    time.sleep(0.2)  # the kernel switches receive stamps on shortly after a socket first asks
    try:
        replica.sendto(
            encode_heartbeat(Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=1)),
            ("127.0.0.1", server.port),
        )
        time.sleep(unread_s)  # the answering thread is not running yet: the heartbeat waits unread
        server.start()
        assert decode_answer(replica.recv(2048)).status is HeartbeatStatus.GRANTED
    finally:
        server.stop()
        replica.close()
    count = metrics.registry.get_sample_value("groupops_operator_heartbeat_socket_wait_seconds_count")
    waited = metrics.registry.get_sample_value("groupops_operator_heartbeat_socket_wait_seconds_sum")
    assert count == 1
    assert waited is not None and unread_s <= waited < unread_s + 5, waited


def _fleet_book(now: list[float], budget: float) -> HeartbeatBook:
    """A book whose Leases are `lease-0`, `lease-1`, ... all held by incarnation p1."""

    def lease(ns: str, name: str) -> dict[str, Any] | None:
        if ns != NS or not name.startswith("lease-"):
            return None
        held = World.lease_object("rv1", LeaseRecord(incarnation="p1", heartbeats=True))
        held["metadata"]["name"] = name
        return held

    return HeartbeatBook(
        leases=lease,
        leading=lambda: True,
        leader_address=lambda: None,
        clock=lambda: now[0],
        fallback_writes_per_second=budget,
    )


def _spread_of(book: HeartbeatBook, replica: int) -> float:
    answer = book.answer(Heartbeat(namespace=NS, lease=f"lease-{replica}", incarnation="p1", seq=1))
    assert answer.status is HeartbeatStatus.GRANTED
    return answer.spread


def test_a_grant_names_the_fleet_over_the_write_budget_as_its_spread() -> None:
    now = [100.0]
    book = _fleet_book(now, budget=2.0)
    assert [_spread_of(book, i) for i in range(3)] == [0.5, 1.0, 1.5]
    assert _spread_of(book, 0) == 1.5, "a replica heard again is not counted twice"
    assert book.fleet() == 3
    assert [_spread_of(_fleet_book(now, budget=0.0), i) for i in range(3)] == [0.0, 0.0, 0.0]


def test_replicas_that_stopped_beating_leave_the_fleet_after_two_windows() -> None:
    now = [100.0]
    book = _fleet_book(now, budget=10.0)
    for i in range(40):
        _spread_of(book, i)
    now[0] += heartbeats.FLEET_WINDOW_S
    for i in range(4):  # 36 of the 40 went away
        assert _spread_of(book, i) == 4.0, "the window before still counts them"
    now[0] += heartbeats.FLEET_WINDOW_S
    assert _spread_of(book, 0) == 0.4
    assert book.fleet() == 4
    for i in range(10):
        _spread_of(book, i)
    now[0] += 3 * heartbeats.FLEET_WINDOW_S  # nobody granted for longer than two windows
    assert _spread_of(book, 7) == 0.1, "only the replica heard now is the fleet"


def test_a_negative_write_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="fallback writes per second"):
        _fleet_book([0.0], budget=-1.0)
