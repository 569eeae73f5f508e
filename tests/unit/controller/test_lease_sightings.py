"""A standby's sightings of consumer Leases carry over to the clock of each policy it starts to
lead: a Lease it watched stay unchanged is judged expired one duration after it first saw that
version, not one duration after the takeover."""

from __future__ import annotations

from typing import Any

from groupops.controller.names import LABEL_POLICY
from groupops.controller.sightings import LeaseSightings, hear_heartbeat_leases
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.plan_format import HEARTBEAT_LIVENESS, LEASE_LIVENESS_ANNOTATION


def lease(
    name: str, renewed: str, *, policy: str = "orders", namespace: str = "team-a", held: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": renewed,
            "labels": {LABEL_POLICY: policy},
        },
        "spec": {"holderIdentity": "x" if held else None, "leaseDurationSeconds": 4, "renewTime": renewed},
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_unchanged_since_before_the_takeover_expires_one_duration_after_it_was_first_seen() -> None:
    time = Clock()
    sightings = LeaseSightings(clock=time)
    sightings.note("ADDED", lease("orders-g-0", "t1"))
    time.now = 101.0
    sightings.note("MODIFIED", lease("orders-g-0", "t2"))  # the last renewal before the crash
    time.now = 103.5  # takeover
    clock = LeaseClock()
    assert sightings.seed(clock, "team-a", "orders") == 1
    assert clock.expired(MemberId("orders-g-0"), 105.0, 4.0)
    assert not clock.expired(MemberId("orders-g-0"), 104.9, 4.0)
    assert clock.next_expiry(after=103.5) == 105.0


def test_only_the_policy_s_own_leases_are_given_and_never_over_what_the_clock_saw() -> None:
    time = Clock()
    sightings = LeaseSightings(clock=time)
    sightings.note("ADDED", lease("orders-g-0", "a"))
    sightings.note("ADDED", lease("refunds-g-0", "a", policy="refunds"))
    sightings.note("ADDED", lease("orders-g-1", "a", namespace="team-b"))
    sightings.note("ADDED", lease("orders-g-2", "a"))
    sightings.note("DELETED", lease("orders-g-2", "a"))
    clock = LeaseClock()
    clock.observe(MemberId("orders-g-0"), "b", 150.0)
    assert sightings.seed(clock, "team-a", "orders") == 0
    assert clock.unchanged_for(MemberId("orders-g-0"), 151.0) == 1.0


def test_an_unheld_lease_never_expires() -> None:
    sightings = LeaseSightings(clock=Clock())
    sightings.note("ADDED", lease("orders-g-0", "a", held=False))
    clock = LeaseClock()
    sightings.seed(clock, "team-a", "orders")
    assert clock.next_expiry(after=0.0) is None


def heartbeat_mode(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["annotations"] = {LEASE_LIVENESS_ANNOTATION: HEARTBEAT_LIVENESS}
    return body


def test_a_heartbeat_lease_is_heard_at_the_takeover_so_a_loop_started_late_fails_over_at_once() -> None:
    # A standby saw the Lease written once (the take), long before; then the replica heartbeated
    # to the old leader, which died. The takeover is at 200; kopf starts this policy's loop at 220.
    time = Clock()
    sightings = LeaseSightings(clock=time)
    sightings.note("ADDED", heartbeat_mode(lease("orders-g-0", "taken")))
    clock = LeaseClock()
    sightings.seed(clock, "team-a", "orders")
    leases = [heartbeat_mode(lease("orders-g-0", "taken")), lease("orders-g-1", "written")]
    assert hear_heartbeat_leases(clock, leases, at=200.0) == 1
    silent, writing = MemberId("orders-g-0"), MemberId("orders-g-1")
    assert clock.expired(silent, 220.0, 4.0), "judged from the takeover, not from the loop's start"
    assert not clock.expired(silent, 203.9, 4.0), "never before a Lease duration after the takeover"
    assert clock.next_expiry(after=200.0) == 204.0
    assert clock.heard_at(writing) is None, "a Lease written by its replica is judged by its versions"


def test_hearing_at_the_takeover_never_moves_a_later_heartbeat_back() -> None:
    clock = LeaseClock()
    clock.hear(MemberId("orders-g-0"), 230.0)  # a grant of this leader, attached to the clock
    hear_heartbeat_leases(clock, [heartbeat_mode(lease("orders-g-0", "taken"))], at=200.0)
    assert clock.heard_at(MemberId("orders-g-0")) == 230.0
    assert not clock.expired(MemberId("orders-g-0"), 233.0, 4.0)
