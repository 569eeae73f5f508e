"""Failover by priority on the whole stack (operator + kubelet harness + broker): the live
replica with the highest priority is active, the others are connected standbys with empty sets.

- A crash (SIGKILL) of the active is seen in its pod's status (the kubelet reports the container
  ended, planner/exits.py) or, failing that, by Lease expiry (the operator's clock), and the
  next priority is consuming within the lease duration plus one renewal period (plus a
  scheduling allowance for a loaded 2-core machine; the benchmark measures it precisely). With a
  long Lease, the pod's status alone fails the crash over, long before the Lease could expire.
- The crashed replica comes back (the harness restarts it, as a kubelet would): with
  `failback: true` the partitions move back to it, with `failback: false` they stay.
- A graceful stop (pod deleted: SIGTERM) hands over at once: well within a long lease duration.
- A stuck active (its callback never returns) is failed over like a crash once
  `maxPollIntervalSeconds` has passed, exits with code 3 and is restarted by the harness.
The journal audit proves no message lost, no overlap, and duplicates only from the crash.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from groupops.consumer.audit import load_journals
from groupops.consumer.progress import EXIT_STUCK
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from groupops.planner.liveness import STUCK_GRACE_S
from groupops.planner.plan_format import lease_record
from groupops.planner.wire import lease_name
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import ProducedLog, SteadyProducer
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_stuck import produce_poison, stalling_env

pytestmark = pytest.mark.e2e

LEASE_SECONDS = DEFAULT_LEASE_DURATION_S
"""The crash test runs the operator with its defaults (lease and tick): failover out of the box."""
RENEW_SECONDS = 1
SCHEDULING_ALLOWANCE_S = 8.0
"""Time a loaded 2-core machine may add to the protocol's bound (process scheduling, watch and
API latency). The benchmark reports the real figures."""
STARTUP_S = 240.0
PARTITIONS = 4


def failover_spec(stack: PolicyStack, *, failback: bool) -> dict[str, Any]:
    return {
        "strategy": {"type": "failover", "failback": failback, "autoOffsetReset": "earliest"},
        "lagSource": {"type": "static", "static": {"lags": {stack.topic: [1] * PARTITIONS}}},
        "consumers": {
            "replicas": 3,
            "priorities": {stack.identity(0): 30, stack.identity(1): 20, stack.identity(2): 10},
        },
    }


def first_processed_by(stack: PolicyStack, identity: str, after: float) -> float | None:
    starts = [
        r.start
        for r in load_journals(stack.record_dir).processed
        if r.identity == identity and r.start > after
    ]
    return min(starts) if starts else None


def holder_incarnation(stack: PolicyStack, identity: str) -> str | None:
    lease = stack.api.get("Lease", stack.namespace, lease_name(stack.name, identity))
    if lease is None or not (lease.get("spec") or {}).get("holderIdentity"):
        return None
    return lease_record(lease["metadata"].get("annotations")).incarnation


def consuming_under_failover(stack: PolicyStack, *, failback: bool, total: int) -> SteadyProducer:
    """The failover policy applied, the highest priority active and both standbys acknowledging,
    `total` messages being produced and the active consuming them for 2 s."""
    active, standby, last = stack.identity(0), stack.identity(1), stack.identity(2)
    stack.apply(**failover_spec(stack, failback=failback))
    wait_for(
        "the highest priority active and both standbys acknowledging",
        lambda: stack.owner_of_everything() == active and stack.settled([active, standby, last]),
        STARTUP_S,
        interval=0.5,
        explain=stack.diagnostics,
    )
    producer = SteadyProducer(stack.bootstrap, stack.topic, PARTITIONS, total=total, rate=250).start()
    wait_for("the active consuming", lambda: first_processed_by(stack, active, 0.0), 60, interval=0.5)
    time.sleep(2.0)
    return producer


def seconds_until_consuming(stack: PolicyStack, identity: str, since: float) -> float:
    """From `since` until `identity` processed a message (it took the partitions over)."""
    first = wait_for(f"{identity} consuming", lambda: first_processed_by(stack, identity, since), 60)
    return float(first) - since


@pytest.mark.parametrize(
    ("failback", "node_lost"),
    [
        pytest.param(True, False, id="failback-crash-reported"),
        pytest.param(False, True, id="no-failback-node-lost"),
    ],
)
def test_a_crashed_active_is_replaced_by_the_next_priority_within_the_lease_duration(
    new_stack: StackFactory, failback: bool, node_lost: bool
) -> None:
    # node_lost: the process dies with its node and no kubelet reports it (the pod's status stays
    # Running), so only the Lease's silence fails it over; the node comes back after the takeover.
    # The crashed replica comes back after 2 lease durations (a kubelet's crash-loop back-off
    # starts at 10 s): a process restarted at once takes its Lease as soon as the operator fenced
    # the dead one, and with failback the standby's turn would be too short to observe.
    with new_stack(
        partitions=PARTITIONS,
        lease_seconds=None,
        operator_tick=None,
        restart_delay=2.0 * LEASE_SECONDS,
    ) as s:
        active, standby = s.identity(0), s.identity(1)
        producer = consuming_under_failover(s, failback=failback, total=8000)
        old_incarnation = holder_incarnation(s, active)

        crashed_at = time.time()
        if node_lost:
            s.kubelet.lose_node(s.pod(0))
        else:
            s.kubelet.crash(s.pod(0))
        wait_for("the next priority owning everything", lambda: s.owner_of_everything() == standby, 120)
        takeover = seconds_until_consuming(s, standby, crashed_at)
        print(
            f"\n{'node lost' if node_lost else 'crash'} -> standby consuming: {takeover:.2f} s "
            f"(lease {LEASE_SECONDS} s, renewal {RENEW_SECONDS} s)"
        )
        assert takeover <= LEASE_SECONDS + RENEW_SECONDS + SCHEDULING_ALLOWANCE_S
        if node_lost:
            s.kubelet.restart_now(s.pod(0))

        # The harness restarts the crashed replica: a new process takes its Lease once the operator
        # fenced the dead one.
        wait_for(
            "the restarted replica holding its Lease",
            lambda: holder_incarnation(s, active) not in (None, old_incarnation),
            120,
        )
        if failback:
            wait_for(
                "the partitions back on the highest priority", lambda: s.owner_of_everything() == active, 120
            )
        else:
            wait_for(
                "the restarted replica acknowledging as a standby", lambda: s.settled([active, standby]), 120
            )
            time.sleep(2 * LEASE_SECONDS)
            assert s.owner_of_everything() == standby, "without failback the partitions stay where they are"

        report = s.wait_processed(producer.wait().acked)
        print(f"{report.summary()}; duplicates from this crash: {report.duplicates}")
        assert report.overlaps == []
        assert report.unexplained == []


def test_a_graceful_stop_hands_over_without_waiting_for_the_lease_to_expire(new_stack: StackFactory) -> None:
    long_lease = 30  # a handover faster than this cannot have waited for expiry
    with new_stack(
        partitions=PARTITIONS,
        lease_seconds=long_lease,
    ) as s:
        standby = s.identity(1)
        producer = consuming_under_failover(s, failback=False, total=5000)

        stopped_at = time.time()
        s.api.delete("Pod", s.namespace, s.pod(0))
        wait_for("the standby owning everything", lambda: s.owner_of_everything() == standby, 120)
        handover = seconds_until_consuming(s, standby, stopped_at)
        print(f"\ngraceful stop -> standby consuming: {handover:.2f} s (lease duration {long_lease} s)")
        assert handover < long_lease
        served = s.metrics_of(standby)  # the pod's metrics port, as Prometheus would scrape it
        assert served["groupops_consumer_partitions_owned"] == PARTITIONS
        assert served["groupops_consumer_lease_valid"] == 1
        assert served["groupops_consumer_epoch_applied"] == s.plan().epoch  # type: ignore[union-attr]

        report = s.wait_processed(producer.wait().acked)
        print(report.summary())
        assert report.overlaps == []
        assert report.unexplained == [], "a graceful stop commits what it processed before releasing"


def test_a_crash_the_pod_reports_fails_over_long_before_the_lease_could_expire(
    new_stack: StackFactory,
) -> None:
    long_lease = 30  # a failover faster than a third of this cannot have waited for expiry
    with new_stack(partitions=PARTITIONS, lease_seconds=long_lease, restart_delay=5.0) as s:
        producer = consuming_under_failover(s, failback=False, total=5000)

        crashed_at = time.time()
        s.kubelet.crash(s.pod(0))
        takeover = seconds_until_consuming(s, s.identity(1), crashed_at)
        print(f"\ncrash -> standby consuming: {takeover:.2f} s (lease duration {long_lease} s)")
        assert takeover < long_lease / 3

        report = s.wait_processed(producer.wait().acked)
        print(f"{report.summary()}; duplicates from this crash: {report.duplicates}")
        assert report.overlaps == []
        assert report.unexplained == []


STUCK_INTERVAL_S = 6
STUCK_LEASE_SECONDS = 4


LENIENT_WATCHDOG_S = 600
"""A replica-side max poll interval that never fires in the test: only the operator's view of
the heartbeats' progress can fail the stuck replica over."""


@pytest.mark.parametrize(
    "own_watchdog",
    [pytest.param(True, id="own-watchdog"), pytest.param(False, id="lenient-watchdog-operator-judges")],
)
def test_a_stuck_active_is_failed_over_within_the_max_poll_interval_and_restarted(
    new_stack: StackFactory, own_watchdog: bool
) -> None:
    # Every replica processes with stall_on_poison; only ordinal 0's process stalls on it. With a
    # lenient watchdog the replicas' own max poll interval (their pod's environment) is overridden
    # far above the policy's: the leader refuses the stuck replica's heartbeats, which carry its
    # progress, and the replica surrenders (docs/design.md §7.5, fifth rule).
    env = stalling_env("*-0")
    if not own_watchdog:
        env["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] = str(LENIENT_WATCHDOG_S)
    with new_stack(partitions=PARTITIONS, lease_seconds=STUCK_LEASE_SECONDS, extra_env=env) as s:
        active, standby = s.identity(0), s.identity(1)
        spec = failover_spec(s, failback=False)
        spec["consumers"]["maxPollIntervalSeconds"] = STUCK_INTERVAL_S
        s.apply(**spec)
        wait_for(
            "the active and the standbys acknowledging",
            lambda: s.owner_of_everything() == active and s.settled([active, standby, s.identity(2)]),
            STARTUP_S,
            interval=0.5,
            explain=s.diagnostics,
        )
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=3000, rate=150).start()
        wait_for("the active consuming", lambda: first_processed_by(s, active, 0.0), 60, interval=0.5)
        stuck_process = s.kubelet.run_of(s.pod(0)).process.process
        assert stuck_process is not None
        old_incarnation = holder_incarnation(s, active)

        poison = ProducedLog()
        poisoned_at = time.time()
        produce_poison(s.bootstrap, s.topic, 0, poison)
        wait_for("the next priority owning everything", lambda: s.owner_of_everything() == standby, 120)
        first = wait_for("the standby consuming", lambda: first_processed_by(s, standby, poisoned_at), 60)
        takeover = first - poisoned_at
        print(
            f"\nstuck -> standby consuming: {takeover:.2f} s (maxPollIntervalSeconds {STUCK_INTERVAL_S} s, "
            f"lease {STUCK_LEASE_SECONDS} s)"
        )
        judged_after = STUCK_INTERVAL_S if own_watchdog else STUCK_INTERVAL_S + STUCK_GRACE_S
        assert takeover <= judged_after + STUCK_LEASE_SECONDS + RENEW_SECONDS + SCHEDULING_ALLOWANCE_S

        # The stuck process ends itself with its own code; the harness restarts it as a kubelet
        # would, and the new process takes the Lease once it expired, as a standby (no failback).
        wait_for("the stuck process exiting", lambda: stuck_process.poll() is not None, 60)
        assert stuck_process.returncode == EXIT_STUCK
        verdicts = [
            str(e.get("why"))
            for e in load_journals(s.record_dir).events
            if e.get("k") == "fence" and e.get("i") == active
        ]
        judge = "loop" if own_watchdog else "operator"  # consumer/progress.py Rule
        assert any(why.startswith(f"stuck ({judge})") for why in verdicts), verdicts
        wait_for(
            "the restarted replica holding its Lease",
            lambda: holder_incarnation(s, active) not in (None, old_incarnation),
            120,
        )
        wait_for("the restarted replica acknowledging", lambda: s.settled([active, standby]), 120)
        assert s.owner_of_everything() == standby

        report = s.wait_processed(producer.wait().acked + poison.acked)
        print(f"{report.summary()}; duplicates: {report.duplicates}")
        assert report.overlaps == []
        assert report.unexplained == []
