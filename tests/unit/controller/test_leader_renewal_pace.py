"""The leader's renewals are paced by their starts (controller/leader.py, docs/design.md §8.1):
with an API server that takes most of a retry period to answer, the next renewal starts as soon
as the slow one ends, so the leader never passes its renew deadline between two renewals that
each succeeded. Paced by their ends, the same latency counts twice and leaves a gap: the
answerer answers `not-leader` and the reconciles are refused while it lasts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from groupops.controller.leader import LeaderElector, renewal_period
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import KubeError

RETRY_S = 0.5
LATENCY_S = 0.45
DEADLINE_S = 1.3
"""Paced by starts, a renewal ends RETRY_S + LATENCY_S (0.95 s) after the one before it was sent,
inside the deadline; paced by ends, RETRY_S + 2 x LATENCY_S (1.4 s), beyond it."""


class Server:
    """An API server that takes `latency_s` to answer a renewal, and records when each was sent."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.sent: list[float] = []

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(time.monotonic())
        time.sleep(self.latency_s)
        return body

    def periods(self) -> list[float]:
        """The times between successive renewals' sends."""
        return [later - earlier for earlier, later in zip(self.sent, self.sent[1:], strict=False)]


def leading(server: Server, retry_s: float, lost: list[str]) -> LeaderElector:
    """An elector that has just won, renewing against `server` every `retry_s`."""
    settings = ElectionSettings(
        namespace="ops",
        identity="leader",
        lease_seconds=2.0,
        renew_deadline_seconds=DEADLINE_S,
        retry_seconds=retry_s,
    )
    elector = LeaderElector(server, settings)  # type: ignore[arg-type]
    held = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": settings.name, "namespace": "ops", "resourceVersion": "1"},
        "spec": {"holderIdentity": "leader", "leaseTransitions": 0},
    }
    elector._won(term=0, sent=time.monotonic(), lease=held)
    elector.start_renewing(lost.append)
    return elector


def test_a_slow_api_server_leaves_no_gap_between_two_successful_renewals() -> None:
    server = Server(LATENCY_S)
    lost: list[str] = []
    elector = leading(server, RETRY_S, lost)
    gaps: list[float] = []
    try:
        until = time.monotonic() + 4.0
        while time.monotonic() < until:
            if not elector.still_leading():
                gaps.append(time.monotonic())
            time.sleep(0.01)
    finally:
        elector.halt()
    assert not lost, lost
    assert len(server.sent) >= 4, "too few renewals to judge the pace"
    assert not gaps, f"not leading between renewals at {len(gaps)} samples (renewals sent at {server.sent})"
    assert max(server.periods()) < RETRY_S + 0.25, f"renewals paced by their ends: {server.periods()}"


def test_renewals_keep_their_period_when_the_api_server_is_fast() -> None:
    server = Server(0.0)
    elector = leading(server, 0.2, [])
    time.sleep(1.1)
    elector.halt()
    periods = server.periods()
    assert periods and min(periods) > 0.15, f"renewals faster than their period: {periods}"


class FlakyServer(Server):
    """Answers at once; the renewals numbered in `failing` (from 0) fail as an API server that
    does not answer would."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__(0.0)
        self.failing = failing

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        attempt = len(self.sent)
        super().replace(body)
        if attempt in self.failing:
            raise KubeError("the API server did not answer", status=0)
        return body


def test_the_leader_renews_at_its_steady_period_and_retries_sooner_after_a_failure() -> None:
    """design §8.1, "the leader renews every 2 s": renew_seconds after a success, retry_seconds
    after a failure, so the deadline still leaves several attempts."""
    server = FlakyServer(failing={1, 2})
    lost: list[str] = []
    settings = ElectionSettings(
        namespace="ops",
        identity="leader",
        lease_seconds=2.0,
        renew_deadline_seconds=DEADLINE_S,
        renew_seconds=0.6,
        retry_seconds=0.2,
    )
    elector = LeaderElector(server, settings)  # type: ignore[arg-type]
    held = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": settings.name, "namespace": "ops", "resourceVersion": "1"},
        "spec": {"holderIdentity": "leader", "leaseTransitions": 0},
    }
    elector._won(term=0, sent=time.monotonic(), lease=held)
    elector.start_renewing(lost.append)
    try:
        time.sleep(2.9)
    finally:
        elector.halt()
    assert not lost, lost
    periods = server.periods()
    # renewal 0 succeeds, 1 and 2 fail, 3 and 4 succeed
    assert len(periods) >= 4, server.sent
    assert periods[0] == pytest.approx(0.6, abs=0.1), f"after renewal 0 succeeded: {periods}"
    assert periods[1] == pytest.approx(0.2, abs=0.1), f"after the failed renewal 1: {periods}"
    assert periods[2] == pytest.approx(0.2, abs=0.1), f"after the failed renewal 2: {periods}"
    assert periods[3] == pytest.approx(0.6, abs=0.1), f"after renewal 3 succeeded: {periods}"


def test_after_a_slow_renewal_the_next_comes_sooner_than_the_steady_period() -> None:
    """A renewal of 0.4 s with a 1.3 s deadline and a 1 s steady period: at the steady pace the
    next one would end 1.4 s after this one was sent, past its deadline, and the leader would not
    lead for a moment; it starts 1.3 - 2 x 0.4 = 0.5 s after this one instead."""
    server = Server(0.4)
    lost: list[str] = []
    settings = ElectionSettings(
        namespace="ops",
        identity="leader",
        lease_seconds=2.0,
        renew_deadline_seconds=DEADLINE_S,
        renew_seconds=1.0,
        retry_seconds=0.1,
    )
    assert renewal_period(settings, 0.01) == 1.0
    assert renewal_period(settings, 0.4) == pytest.approx(0.5)
    assert renewal_period(settings, 2.0) == 0.1
    elector = LeaderElector(server, settings)  # type: ignore[arg-type]
    held = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": settings.name, "namespace": "ops", "resourceVersion": "1"},
        "spec": {"holderIdentity": "leader", "leaseTransitions": 0},
    }
    elector._won(term=0, sent=time.monotonic() - 0.4, lease=held)  # a take as slow as a renewal
    elector.start_renewing(lost.append)
    gaps = 0
    try:
        until = time.monotonic() + 3.5
        while time.monotonic() < until:
            gaps += not elector.still_leading()
            time.sleep(0.01)
    finally:
        elector.halt()
    assert not lost, lost
    assert gaps == 0, f"not leading at {gaps} samples (renewals sent at {server.sent})"
    assert len(server.periods()) >= 3
    assert all(p == pytest.approx(0.5, abs=0.1) for p in server.periods()[1:]), server.periods()


def test_a_renewal_period_beyond_the_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match="renew period"):
        ElectionSettings(namespace="ops", identity="x", renew_seconds=4.0)
    with pytest.raises(ValueError, match="renew period"):
        ElectionSettings(namespace="ops", identity="x", renew_seconds=0.5, retry_seconds=1.0)
