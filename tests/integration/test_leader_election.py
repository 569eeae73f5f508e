"""Leader election on the real API server: one leader at a time; a standby takes over only once
the leader's Lease went unrenewed for its duration (by the standby's own clock), in a newer term;
the deposed leader learns it at its next renewal; a leader that steps down is replaced at once; a
standby watches the Lease and sends no request while the leader renews."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from groupops.controller.leader import LeaderElector
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import KubeClient
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.integration

LEASE_S = 2.0
RETRY_S = 0.25


def elector(client: KubeClient, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(
        client,
        ElectionSettings(
            namespace=namespace,
            identity=identity,
            lease_seconds=LEASE_S,
            renew_deadline_seconds=LEASE_S * 0.7,
            retry_seconds=RETRY_S,
        ),
    )


class Campaign:
    """`elector.acquire` in a thread; `won_at` is the monotonic moment it returned True."""

    def __init__(self, candidate: LeaderElector) -> None:
        self.stop = threading.Event()
        self.won_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(candidate,), daemon=True)
        self._thread.start()

    def _run(self, candidate: LeaderElector) -> None:
        if candidate.acquire(self.stop):
            self.won_at = time.monotonic()

    def end(self) -> None:
        self.stop.set()
        self._thread.join(timeout=10)


def halt_and_see_the_standby_take_over(
    leader: LeaderElector, standby: LeaderElector, campaign: Campaign
) -> None:
    """Stop the leader's renewals (as when its process or node dies): the standby leads, in the
    next term, and only once the Lease ran out."""
    leader.halt()
    halted_at = time.monotonic()
    wait_for("the standby to lead", lambda: campaign.won_at is not None, 10 * LEASE_S, interval=0.05)
    assert campaign.won_at is not None
    waited = campaign.won_at - halted_at
    assert waited >= LEASE_S - RETRY_S, f"took over after {waited:.2f} s, before the Lease ran out"
    assert standby.term == leader.term + 1


def test_one_leader_then_a_takeover_in_a_newer_term_after_the_lease_runs_out(
    client: KubeClient, namespace: str
) -> None:
    first, second = elector(client, namespace, "first"), elector(client, namespace, "second")
    assert first.acquire(threading.Event())
    lost: list[str] = []
    first.start_renewing(lost.append)
    campaign = Campaign(second)
    try:
        time.sleep(3 * LEASE_S)
        assert campaign.won_at is None, "the standby took a Lease that was being renewed"
        assert first.still_leading() and not lost

        halt_and_see_the_standby_take_over(first, second, campaign)
        assert not first.still_leading(), "a halted leader must stop counting itself leader"

        first.start_renewing(lost.append)  # the deposed leader's late renewal
        wait_for("the deposed leader to learn it", lambda: lost, 5 * LEASE_S, interval=0.05)
        assert "second" in lost[0]
    finally:
        campaign.end()


def test_a_leader_that_steps_down_is_replaced_at_once(client: KubeClient, namespace: str) -> None:
    leader, standby = elector(client, namespace, "leader"), elector(client, namespace, "standby")
    assert leader.acquire(threading.Event())
    leader.start_renewing(lambda _: None)
    campaign = Campaign(standby)
    try:
        time.sleep(LEASE_S)
        stepped_down_at = time.monotonic()
        leader.release()
        wait_for("the standby to lead", lambda: campaign.won_at is not None, 10 * LEASE_S, interval=0.05)
        assert campaign.won_at is not None
        assert campaign.won_at - stepped_down_at < LEASE_S, "a clean step-down must not wait out the Lease"
        assert standby.term == leader.term + 1
    finally:
        campaign.end()


def test_a_standby_sends_nothing_but_its_watch_while_the_leader_renews_and_still_takes_over(
    client: KubeClient, namespace: str, kube_config: str
) -> None:
    standby_client = KubeClient.from_environment(kubeconfig=kube_config)
    requests: Counter[tuple[str, str]] = Counter()
    standby_client.count_requests(lambda verb, kind: requests.update([(verb, kind)]))
    leader, standby = elector(client, namespace, "leader"), elector(standby_client, namespace, "standby")
    assert leader.acquire(threading.Event())
    leader.start_renewing(lambda _: None)
    campaign = Campaign(standby)
    try:
        wait_for("the standby's watch", lambda: requests[("watch", "Lease")] >= 1, 10, interval=0.05)
        time.sleep(LEASE_S)  # its first GET, then the watch takes over
        before = requests.copy()
        time.sleep(4 * LEASE_S)  # 32 renewals of the leader
        sent = requests - before
        assert campaign.won_at is None
        assert sum(n for (verb, _), n in sent.items() if verb != "watch") == 0, sent

        halt_and_see_the_standby_take_over(leader, standby, campaign)
    finally:
        campaign.end()
        leader.halt()
        standby_client.close()
