"""Heartbeats instead of Lease renewals (docs/design.md §7.5), on the real API server with the
operator's real heartbeat server and the consumer's real Lease keeper, each test twice: answered
in a thread of the operator's (`[thread]`) and in a process of its own with a mirror of a real
Lease watch cache (`[process]`, controller/heartbeat_process.py):

- at steady state the replica stays valid on heartbeats alone: its Lease is not written;
- with no operator answering it falls back to renewing the Lease and stays valid;
- with a fleet larger than the operator's write budget (here a budget of half a write a second
  for a fleet of one), its grants name a spread and the fallback writes come a spread apart,
  the replica pausing in between;
- the operator's fence refuses the next heartbeat; the replica re-reads the Lease and raises
  its floor, and a granted heartbeat needs its acknowledgement of the fence first;
- a second process of the same identity does not take a Lease in heartbeat mode from a silent
  holder on its own clock: only once the operator's fence names the silent process;
- a real replica process reports its progress with every heartbeat (its loop polls all along);
- a replica reporting progress beyond maxPollIntervalSeconds is refused as stuck, surrenders
  instead of writing its Lease, and the operator's fence lands once it has been silent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from groupops.consumer.kube import ReplicaKube
from groupops.consumer.lease import LeaseKeeper
from groupops.consumer.settings import LeaseSettings
from groupops.controller.cache import WatchCache
from groupops.controller.heartbeat_process import HeartbeatProcess
from groupops.controller.heartbeats import HeartbeatBook, HeartbeatGuard, HeartbeatServer
from groupops.controller.names import LABEL_POLICY
from groupops.devstack.kubelet import ConsumerProcess
from groupops.kubeapi import KubeClient
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import STUCK_GRACE_S
from groupops.planner.plan_format import fence_annotations, lease_record
from tests.e2e.runtime_support import consumer_env
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.integration

POLICY = "orders"
LEASE = "orders-worker-0"
DURATION_S = 2


class Operator:
    """The operator's side: a UDP server and its book, over the live API (`thread`) or, in a
    process of its own, over a mirror of a Lease watch cache (`process`)."""

    def __init__(self, client: KubeClient, namespace: str, where: str, *, budget: float = 0.0) -> None:
        self.client = client
        self.namespace = namespace
        self.clock = LeaseClock()
        self._stops: list[Callable[[], None]] = []
        self.book: HeartbeatGuard
        if where == "thread":
            book = HeartbeatBook(
                leases=lambda ns, name: client.get("coordination.k8s.io/v1", "Lease", ns, name),
                leading=lambda: True,
                leader_address=lambda: None,
                fallback_writes_per_second=budget,
            )
            server = HeartbeatServer(book, "127.0.0.1", 0)
            server.start()
            self.book, self.port = book, server.port
            self._stops.append(server.stop)
        else:
            leases = WatchCache(
                client,
                "coordination.k8s.io/v1",
                "Lease",
                namespaces=(namespace,),
                label_selector=LABEL_POLICY,
            )
            leases.start()
            self._stops.append(leases.stop)
            assert leases.wait_synced(10)
            answerer = HeartbeatProcess("127.0.0.1", 0, fallback_writes_per_second=budget)
            self._stops.insert(0, answerer.stop)
            answerer.mirror_leases(leases.listen_from_here)
            answerer.start_leadership(lambda: float("inf"), lambda: None)
            self.book, self.port = answerer, answerer.port
        self.book.attach(namespace, POLICY, self.clock)

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops.clear()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def lease(self) -> dict[str, Any]:
        lease = self.client.get("coordination.k8s.io/v1", "Lease", self.namespace, LEASE)
        assert lease is not None
        return lease

    def fence(self, epoch: int) -> bool:
        """As the reconcile's fence: the guard, then compare-and-swap on the version read."""
        lease = self.lease()
        meta = lease["metadata"]
        incarnation = lease_record(meta.get("annotations")).incarnation
        if not self.book.may_fence(
            self.namespace,
            POLICY,
            LEASE,
            incarnation=incarnation,
            version=meta["resourceVersion"],
            duration_s=DURATION_S,
        ):
            return False
        self.client.patch(
            "coordination.k8s.io/v1",
            "Lease",
            self.namespace,
            LEASE,
            {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "annotations": fence_annotations(epoch, incarnation),
                }
            },
        )
        return True


def create_lease(client: KubeClient, namespace: str) -> None:
    client.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": namespace, "labels": {LABEL_POLICY: POLICY}},
            "spec": {"leaseDurationSeconds": DURATION_S},
        }
    )


def keeper(
    kube_config: str,
    namespace: str,
    addresses: tuple[str, ...],
    incarnation: str,
    *,
    progress: Callable[[], Mapping[str, float]] | None = None,
    phase: float | None = None,
) -> LeaseKeeper:
    settings = LeaseSettings(
        duration_s=DURATION_S,
        renew_interval_s=0.25,
        renew_deadline_s=DURATION_S * 0.75,
        request_timeout_s=0.5,
        heartbeat_addresses=addresses,
    )
    kube = ReplicaKube.connect(namespace, kubeconfig=kube_config, timeout_s=1.0)
    return LeaseKeeper(
        kube,
        settings,
        name=LEASE,
        policy=POLICY,
        identity="worker-0",
        incarnation=incarnation,
        progress=progress,
        phase=phase,
    )


@pytest.fixture(params=["thread", "process"])
def operator(client: KubeClient, namespace: str, request: pytest.FixtureRequest) -> Iterator[Operator]:
    create_lease(client, namespace)
    operator = Operator(client, namespace, request.param)
    yield operator
    operator.stop()


@pytest.fixture(params=["thread", "process"])
def budgeted_operator(
    client: KubeClient, namespace: str, request: pytest.FixtureRequest
) -> Iterator[Operator]:
    """An operator whose write budget, half a write a second, is below its fleet of one."""
    create_lease(client, namespace)
    operator = Operator(client, namespace, request.param, budget=0.5)
    yield operator
    operator.stop()


def version(operator: Operator) -> str:
    return str(operator.lease()["metadata"]["resourceVersion"])


def test_a_replica_stays_valid_on_heartbeats_without_writing_its_lease(
    kube_config: str, namespace: str, operator: Operator
) -> None:
    replica = keeper(kube_config, namespace, (operator.address,), "first")
    assert replica.acquire(threading.Event())
    replica.start()
    try:
        wait_for("a granted heartbeat", lambda: replica.heartbeats_granted > 0, 10, interval=0.05)
        before, writes = version(operator), replica.renewals
        for _ in range(12):  # 3 s: longer than the Lease duration and the validity of one write
            time.sleep(0.25)
            assert replica.valid(), "a replica whose heartbeats are granted stays valid"
        assert version(operator) == before, "the Lease was written at steady state"
        assert replica.renewals == writes
        assert replica.heartbeats_granted >= 8
        silent = operator.clock.unchanged_for(MemberId(LEASE), time.monotonic())
        assert silent is not None and silent < 1.0, "the operator's clock hears the heartbeats"
        assert lease_record(operator.lease()["metadata"]["annotations"]).heartbeats

        # No operator answers: the replica renews its Lease instead and stays valid, writing only
        # when its validity (1.5 s) no longer covers an interval, an exchange and a write (0.94 s):
        # about every 0.9 s, not after each of the 0.44 s exchanges.
        operator.stop()
        writes, waited = replica.renewals, replica.fallback_writes_waited
        for _ in range(12):
            time.sleep(0.25)
            assert replica.valid(), "an operator outage must not stop a live replica"
        assert replica.renewals >= writes + 2
        assert replica.fallback_writes_waited >= waited + 2, "the writes its validity covered waited"
        assert replica.renewals - writes < 6, "fewer writes than unanswered exchanges"
        assert version(operator) != before
    finally:
        replica.stop()


def test_beyond_the_write_budget_the_fallback_writes_come_a_spread_apart_and_the_replica_pauses(
    kube_config: str, namespace: str, budgeted_operator: Operator
) -> None:
    # Grants name a spread of 2 s (a fleet of one over half a write a second). Without it, this
    # replica's writes would come about every 0.9 s once no operator answers (above); with it,
    # half a spread after the first was needed (phase 0.5), then 2 s apart, and its 1.5 s of
    # validity per write leaves it paused in between.
    operator = budgeted_operator
    replica = keeper(kube_config, namespace, (operator.address,), "first", phase=0.5)
    assert replica.acquire(threading.Event())
    replica.start()
    try:
        wait_for("a granted heartbeat", lambda: replica.heartbeats_granted > 2, 10, interval=0.05)
        operator.stop()
        writes, spread_waits = replica.renewals, replica.fallback_writes_spread
        paused = False
        end = time.monotonic() + 4.5
        while time.monotonic() < end:
            paused = paused or not replica.valid()
            time.sleep(0.05)
        assert 1 <= replica.renewals - writes <= 3, replica.renewals - writes
        assert replica.fallback_writes_spread >= spread_waits + 2
        assert paused, "between two writes a spread apart its validity ran out"
    finally:
        replica.stop()


def test_a_fence_refuses_the_next_heartbeat_and_the_replica_learns_its_floor(
    kube_config: str, namespace: str, operator: Operator
) -> None:
    replica = keeper(kube_config, namespace, (operator.address,), "first")
    assert replica.acquire(threading.Event())
    replica.start()
    try:
        wait_for("a granted heartbeat", lambda: replica.heartbeats_granted > 0, 10, interval=0.05)
        assert not operator.fence(7), "a replica heard within the duration is alive: no fence"
        replica.stop()  # silent from now on, as a frozen process
        time.sleep(DURATION_S + 0.2)
        assert not replica.valid(), "a silent replica's validity ends before the operator judges it"
        assert operator.fence(7)
        assert lease_record(operator.lease()["metadata"]["annotations"]).fenced_incarnation == "first"
        granted = replica.heartbeats_granted
        assert not replica.beat_once(), "a fenced incarnation is refused"
        assert replica.heartbeats_granted == granted
        assert replica.renew_once(), "the Lease write that follows a refusal conflicts, re-reads, writes"
        assert replica.floor == 7, "the conflict made it see the fence"
        record = lease_record(operator.lease()["metadata"]["annotations"])
        assert record.fenced_incarnation is None and record.released_through == 7
        # Once the operator sees the acknowledgement (its view may lag the write by a watch event).
        wait_for("a granted heartbeat after the acknowledgement", replica.beat_once, 5, interval=0.1)
    finally:
        replica.stop()


def test_a_new_process_takes_a_heartbeat_lease_only_once_the_operator_fenced_the_old_one(
    kube_config: str, namespace: str, operator: Operator
) -> None:
    zombie = keeper(kube_config, namespace, (operator.address,), "zombie")
    assert zombie.acquire(threading.Event())
    zombie.start()
    wait_for("a granted heartbeat", lambda: zombie.heartbeats_granted > 0, 10, interval=0.05)
    successor = keeper(kube_config, namespace, (operator.address,), "successor")
    stop = threading.Event()
    taken: list[bool] = []
    thread = threading.Thread(target=lambda: taken.append(successor.acquire(stop)), daemon=True)
    thread.start()
    try:
        time.sleep(3 * DURATION_S)  # the Lease is unchanged all along: the zombie only sends heartbeats
        assert not taken, "a successor took the Lease beside a holder that still gets heartbeats granted"
        assert zombie.valid()
        zombie.stop()
        wait_for("the zombie silent for the duration", lambda: operator.fence(3), 10, interval=0.2)
        thread.join(timeout=10)
        assert taken == [True]
        assert successor.floor == 3
        assert not zombie.beat_once(), "the old incarnation gets no grant after the takeover"
    finally:
        stop.set()
        zombie.stop()
        successor.stop()


def test_a_replica_process_reports_its_progress_with_its_heartbeats(
    kube_config: str, namespace: str, operator: Operator, kafka_bootstrap: str, tmp_path: Path
) -> None:
    process = ConsumerProcess(
        identity="worker-0",
        env=consumer_env(
            policy=POLICY,
            identity="worker-0",
            namespace=namespace,
            group_id=f"{namespace}-processor",
            bootstrap=kafka_bootstrap,
            kubeconfig=kube_config,
            record_dir=tmp_path / "journal",
            lease_seconds=4,
            extra={"GROUPOPS_HEARTBEAT_ADDRESSES": operator.address},
        ),
        log_path=tmp_path / "worker-0.log",
    )
    process.start()
    try:
        first = wait_for(
            "a heartbeat carrying progress",
            lambda: operator.book.progress_of(namespace, LEASE),
            120,
            interval=0.1,
            explain=process.log_tail,
        )
        heard = [first]

        def three_seconds_of_heartbeats() -> bool:
            latest = operator.book.progress_of(namespace, LEASE)
            if latest is not None and latest.heard_at > heard[-1].heard_at:
                heard.append(latest)
            return heard[-1].heard_at - first.heard_at >= 3.0

        wait_for(
            "heartbeats for 3 s", three_seconds_of_heartbeats, 60, interval=0.1, explain=process.log_tail
        )
        assert len(heard) >= 3, "every heartbeat carries the progress, fresh"
        for progress in (h.progress for h in heard):
            # Owning nothing, its loop comes back to poll several times a second; a generous bound.
            assert progress["poll"] < 3.0, heard
            assert "advance" not in progress, "no lag: nothing to advance"
            assert "commit" not in progress, "nothing committed yet"
    finally:
        process.terminate(grace=30)


def test_a_replica_reporting_no_progress_is_refused_as_stuck_and_fenced_once_silent(
    kube_config: str, namespace: str, operator: Operator
) -> None:
    operator.book.note_max_poll_interval(namespace, POLICY, 6)
    progress = {"poll": 0.1}
    replica = keeper(kube_config, namespace, (operator.address,), "first", progress=lambda: dict(progress))
    assert replica.acquire(threading.Event())
    replica.start()
    try:
        wait_for("a granted heartbeat", lambda: replica.heartbeats_granted > 0, 10, interval=0.05)
        assert not operator.fence(7), "a replica heard within the duration is alive: no fence"
        before = version(operator)
        # Its loop stopped coming back to poll, past the operator's grace; its own watchdog says nothing.
        progress["poll"] = 6 + STUCK_GRACE_S + 0.5
        wait_for("the replica no longer valid", lambda: not replica.valid(), 10, interval=0.05)
        assert not replica.renew_once(), "refused as stuck: it writes its Lease no more"
        assert version(operator) == before, "no Lease write followed the refusal"
        # Silent on both channels: the operator's fence lands once the Lease duration has passed.
        wait_for("the stuck replica fenced", lambda: operator.fence(7), 10, interval=0.2)
        assert lease_record(operator.lease()["metadata"]["annotations"]).fenced_incarnation == "first"
    finally:
        replica.stop()
