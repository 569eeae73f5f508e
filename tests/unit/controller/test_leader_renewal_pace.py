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


class SlowServer:
    """An API server that takes LATENCY_S to answer a renewal, and records when each was sent."""

    def __init__(self) -> None:
        self.sent: list[float] = []

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(time.monotonic())
        time.sleep(LATENCY_S)
        return body


def test_a_slow_api_server_leaves_no_gap_between_two_successful_renewals() -> None:
    settings = ElectionSettings(
        namespace="ops",
        identity="leader",
        lease_seconds=2.0,
        renew_deadline_seconds=DEADLINE_S,
        retry_seconds=RETRY_S,
    )
    server = SlowServer()
    elector = LeaderElector(server, settings)  # type: ignore[arg-type]
    held = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": settings.name, "namespace": "ops", "resourceVersion": "1"},
        "spec": {"holderIdentity": "leader", "leaseTransitions": 0},
    }
    elector._won(term=0, sent=time.monotonic(), lease=held)
    lost: list[str] = []
    elector.start_renewing(lost.append)
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
    starts = [later - earlier for earlier, later in zip(server.sent, server.sent[1:], strict=False)]
    assert max(starts) < RETRY_S + 0.25, f"renewals paced by their ends: {starts}"


def test_renewals_keep_their_period_when_the_api_server_is_fast() -> None:
    settings = ElectionSettings(
        namespace="ops",
        identity="leader",
        lease_seconds=2.0,
        renew_deadline_seconds=DEADLINE_S,
        retry_seconds=0.2,
    )

    class FastServer(SlowServer):
        def replace(self, body: dict[str, Any]) -> dict[str, Any]:
            self.sent.append(time.monotonic())
            return body

    server = FastServer()
    elector = LeaderElector(server, settings)  # type: ignore[arg-type]
    elector._won(term=0, sent=time.monotonic(), lease={"metadata": {}, "spec": {"holderIdentity": "leader"}})
    elector.start_renewing(lambda reason: None)
    time.sleep(1.1)
    elector.halt()
    starts = [later - earlier for earlier, later in zip(server.sent, server.sent[1:], strict=False)]
    assert starts and min(starts) > 0.15, f"renewals faster than their period: {starts}"
