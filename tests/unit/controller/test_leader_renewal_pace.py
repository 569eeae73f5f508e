"""The leader's renewals are paced by their starts (controller/leader.py, docs/design.md §8.1):
with an API server that takes most of a retry period to answer, the next renewal starts as soon
as the slow one ends, so the leader never passes its renew deadline between two renewals that
each succeeded. Paced by their ends, the same latency counts twice and leaves a gap: the
answerer answers `not-leader` and the reconciles are refused while it lasts."""

from __future__ import annotations

import time
from typing import Any

from groupops.controller.leader import LeaderElector
from groupops.controller.settings import ElectionSettings

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
