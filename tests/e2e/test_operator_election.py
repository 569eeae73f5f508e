"""Two operators on one namespace, the whole stack running (real API server, broker, consumer
processes): one leads at a time, a SIGKILLed leader is replaced within the election Lease's
duration, and whatever happens to the plan ConfigMap (deleted, an older plan restored, edited by
hand) while both run, no partition is ever consumed by two replicas, nothing is lost and the
epoch the consumers follow only goes forward. A rolling update (the leader SIGTERMed) hands over at
once, exits cleanly and pauses no replica.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from groupops.planner.wire import plan_configmap_name
from tests.e2e.consumer_e2e import PolicyStack, StackFactory, rewrite_plan_by_hand
from tests.e2e.operator_support import OperatorProcess, election_holder
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.test_failover import first_processed_by
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 6
ELECTION_LEASE_S = 5.0
"""The operator's default --leader-lease-seconds."""
TAKEOVER_ALLOWANCE_S = 3.0
"""What a loaded 2-core machine may add to lease + 1 s (process scheduling, API latency)."""


def holder(stack: PolicyStack) -> str | None:
    return election_holder(stack.api, stack.namespace)


class EpochWatch:
    """Samples the plan ConfigMap's epoch every 50 ms; `regressions` lists every decrease that was
    not one of our own writes (`our_write` makes those)."""

    def __init__(self, stack: PolicyStack) -> None:
        self._stack = stack
        self.highest = 0
        self.regressions: list[tuple[int, int]] = []
        self._ours: set[str] = set()
        self._lock = threading.Lock()
        """Held by a sample and by one of our writes with its registration, so a sample never
        reads our write before it is known as ours."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> EpochWatch:
        self._thread.start()
        return self

    def our_write(self, write: Callable[[], dict[str, Any]]) -> None:
        """Make a write of the test's own (returning the written object), known as ours before
        any sample can see it."""
        with self._lock:
            written = write()
            self._ours.add(written["metadata"]["resourceVersion"])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                self._sample()

    def _sample(self) -> None:
        configmap = self._stack.api.get("ConfigMap", self._stack.namespace, plan_configmap_name("orders"))
        if configmap is None or configmap["metadata"]["resourceVersion"] in self._ours:
            return
        epoch = int((configmap.get("data") or {}).get("epoch", "0"))
        if epoch < self.highest:
            self.regressions.append((self.highest, epoch))
        self.highest = max(self.highest, epoch)


@contextmanager
def second_operator(s: PolicyStack, tmp_path: Path, **options: Any) -> Iterator[OperatorProcess]:
    """Another operator on the stack's namespace, started (it campaigns beside the stack's own),
    stopped and its log's tail printed at the end."""
    second = OperatorProcess(
        kubeconfig=s.api.kubeconfig, namespace=s.namespace, log_path=tmp_path / "operator-2.log", **options
    )
    second.start()
    try:
        yield second
    finally:
        second.stop()
        print(f"--- second operator ---\n{second.log_tail(30)}")


def one_leader(first: OperatorProcess, second: OperatorProcess) -> tuple[OperatorProcess, OperatorProcess]:
    """Wait until exactly one of the two leads; (leader, standby)."""
    wait_for("one leader", lambda: first.leads() != second.leads(), 30, interval=0.2)
    return (first, second) if first.leads() else (second, first)


def wait_first_plan(s: PolicyStack, identities: list[str]) -> None:
    wait_for(
        f"{len(identities)} replicas on the first plan",
        lambda: s.settled(identities),
        240,
        interval=0.5,
        explain=s.diagnostics,
    )


def test_two_operators_lead_one_at_a_time_and_never_let_two_replicas_own_a_partition(
    new_stack: StackFactory, tmp_path: Path
) -> None:
    with (
        new_stack(partitions=PARTITIONS) as s,
        second_operator(s, tmp_path, extra=["--lease-duration", str(s.lease_seconds)]) as second,
    ):
        _run_scenario(s, s.operator, second)  # both campaign at once


def _run_scenario(s: PolicyStack, first: OperatorProcess, second: OperatorProcess) -> None:
    s.apply(
        strategy={"type": "range", "autoOffsetReset": "earliest"},
        lagSource={"type": "static", "static": {"lags": {s.topic: [1] * PARTITIONS}}},
        consumers={"replicas": 3},
    )
    identities = [s.identity(i) for i in range(3)]
    wait_first_plan(s, identities)
    leader, standby = one_leader(first, second)
    assert holder(s) is not None
    assert "standing by" in standby.log_path.read_text(errors="replace")
    original = s.api.get("ConfigMap", s.namespace, plan_configmap_name(s.name))
    assert original is not None
    watch = EpochWatch(s).start()
    producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=6_000, rate=150).start()
    try:
        time.sleep(4)
        # The leader dies: the standby leads within the election Lease's duration.
        deposed = holder(s)
        killed_at = time.monotonic()
        leader.kill()
        wait_for("the standby to lead", lambda: holder(s) not in (None, deposed), 30, interval=0.05)
        takeover = time.monotonic() - killed_at
        print(f"takeover after {takeover:.2f} s (election Lease {ELECTION_LEASE_S:g} s)")
        assert takeover <= ELECTION_LEASE_S + 1 + TAKEOVER_ALLOWANCE_S
        wait_for("the new leader to run", standby.leads, 30, interval=0.2)
        leader.start()  # back as the standby: two operators again
        time.sleep(3)

        # The plan ConfigMap deleted under both.
        before = watch.highest
        s.api.delete("ConfigMap", s.namespace, plan_configmap_name(s.name))
        wait_for(
            "a new plan above the deleted one",
            lambda: (p := s.plan()) is not None and p.epoch > before and s.settled(identities),
            120,
            interval=0.2,
            explain=s.diagnostics,
        )

        # An older plan restored by hand.
        before = watch.highest
        rewrite_plan_by_hand(s, original["data"], original["metadata"]["annotations"], watch.our_write)
        wait_for(
            "a plan above the restored one",
            lambda: (p := s.plan()) is not None and p.epoch > before and s.settled(identities),
            120,
            interval=0.2,
            explain=s.diagnostics,
        )

        # A hand edit at the same epoch that gives every partition to one replica.
        current = s.api.get("ConfigMap", s.namespace, plan_configmap_name(s.name))
        assert current is not None
        everything = sorted(
            (
                tp
                for key, value in current["data"].items()
                if key not in {"epoch", "strategy"}
                for tp in json.loads(value)
            )
        )
        edited = {**current["data"], **{i: "[]" for i in identities}, identities[2]: json.dumps(everything)}
        before = watch.highest
        rewrite_plan_by_hand(s, edited, current["metadata"]["annotations"], watch.our_write)
        wait_for(
            "a plan above the edited one",
            lambda: (p := s.plan()) is not None and p.epoch > before and s.settled(identities),
            120,
            interval=0.2,
            explain=s.diagnostics,
        )
        report = s.wait_processed(producer.wait().acked)
    finally:
        watch.stop()
    print(report.summary())
    assert not report.overlaps, f"{report.summary()}\n{s.diagnostics()}"
    assert not report.unexplained, report.summary()
    assert watch.regressions == [], f"the epoch went back: {watch.regressions}"
    assert sum(1 for o in (first, second) if o.alive()) == 2


TOGETHER_BOUND_S = 10.0
"""A standby replica consumes within this long when the leading operator and the active replica
die together (the election Lease, then the standby operator's own sightings of the dead
replica's Lease while it stood by)."""


def test_the_leader_and_the_active_replica_dying_together_fail_over_within_ten_seconds(
    new_stack: StackFactory, tmp_path: Path
) -> None:
    # The two died with their node: the crashed replica is not restarted within the test (a
    # restart on the same node could take its own Lease back before the new leader judges it).
    with (
        new_stack(partitions=PARTITIONS, lease_seconds=None, operator_tick=None, restart_delay=600.0) as s,
        second_operator(s, tmp_path, tick=None) as second,
    ):
        active, standby = s.identity(0), s.identity(1)
        s.apply(
            strategy={"type": "failover", "failback": False, "autoOffsetReset": "earliest"},
            lagSource={"type": "static", "static": {"lags": {s.topic: [1] * PARTITIONS}}},
            consumers={"replicas": 2, "priorities": {active: 20, standby: 10}},
        )
        wait_for(
            "the active owning everything, the standby acknowledging",
            lambda: s.owner_of_everything() == active and s.settled([active, standby]),
            240,
            interval=0.5,
            explain=s.diagnostics,
        )
        leader, _ = one_leader(s.operator, second)
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=4000, rate=250).start()
        wait_for("the active consuming", lambda: first_processed_by(s, active, 0.0), 60, interval=0.5)
        time.sleep(2.0)

        killed_at = time.time()
        leader.kill()
        s.kubelet.crash(s.pod(0))
        first = wait_for("the standby consuming", lambda: first_processed_by(s, standby, killed_at), 60)
        took = first - killed_at
        print(f"\nleader and active replica killed together -> standby consuming: {took:.2f} s")
        assert took <= TOGETHER_BOUND_S + TAKEOVER_ALLOWANCE_S
        report = s.wait_processed(producer.wait().acked)
        assert report.overlaps == []
        assert report.unexplained == []


HANDOVER_BOUND_S = 2.0
"""A stepped-down leader's standby leads within this (it watches the election Lease and takes an
unheld one at once; the Lease's own duration is not waited out)."""


def test_a_rolling_update_of_the_operator_hands_over_without_pausing_a_replica(
    new_stack: StackFactory, tmp_path: Path
) -> None:
    """The leader SIGTERMed beside a standby, as `kubectl rollout restart` or a chart upgrade
    does: it steps down and exits cleanly (status 0, nothing critical logged), the standby leads
    at once, and every replica keeps its validity on heartbeats throughout: none fences itself,
    each keeps processing, and nothing is lost or processed by two."""
    with (
        new_stack(partitions=PARTITIONS, lease_seconds=None, operator_tick=None) as s,
        second_operator(s, tmp_path, tick=None) as second,
    ):
        identities = [s.identity(i) for i in range(3)]
        s.apply(strategy={"type": "range", "autoOffsetReset": "earliest"}, consumers={"replicas": 3})
        wait_first_plan(s, identities)
        leader, standby = one_leader(s.operator, second)
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=4_000, rate=200).start()
        wait_for(
            "every replica granted heartbeats",
            lambda: all(
                s.metric_total(s.identity(i), "groupops_consumer_heartbeats_total", answer="granted") >= 3
                for i in range(3)
            ),
            60,
            interval=0.5,
        )
        fences = [s.metric_total(s.identity(i), "groupops_consumer_self_fences_total") for i in range(3)]
        processed = [
            s.metric_total(s.identity(i), "groupops_consumer_messages_processed_total") for i in range(3)
        ]

        deposed = holder(s)
        stopped_at = time.monotonic()
        assert leader.process is not None
        leader.process.send_signal(signal.SIGTERM)
        wait_for("the standby to lead", lambda: holder(s) not in (None, deposed), 30, interval=0.02)
        took = time.monotonic() - stopped_at
        code = leader.process.wait(timeout=30)
        print(f"\nrolling update: the standby led {took:.2f} s after the leader's SIGTERM; it exited {code}")
        assert code == 0, f"a graceful stop exits 0, got {code}\n{leader.log_tail(20)}"
        assert "CRITICAL" not in leader.log_path.read_text(errors="replace"), leader.log_tail(20)
        assert took <= HANDOVER_BOUND_S + TAKEOVER_ALLOWANCE_S
        wait_for("the new leader to run", standby.leads, 30, interval=0.2)
        time.sleep(3 * s.lease_seconds)  # longer than any replica's validity without a grant

        assert [
            s.metric_total(s.identity(i), "groupops_consumer_self_fences_total") for i in range(3)
        ] == fences, "a replica stopped consuming during the handover"
        now = [s.metric_total(s.identity(i), "groupops_consumer_messages_processed_total") for i in range(3)]
        assert all(n > p for n, p in zip(now, processed, strict=True)), (
            f"processing stalled: {processed} -> {now}"
        )
        report = s.wait_processed(producer.wait().acked)
        print(report.summary())
        assert report.overlaps == []
        assert report.unexplained == []
