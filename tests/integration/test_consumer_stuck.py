"""Stuck replicas are failed over (consumer/progress.py), against the real API server and the real
broker: a `groupops consume` process whose callback never returns, or that reaches the API server
but not Kafka, stops renewing its Lease and exits with its own code once the Lease has surely
expired; one on an idle topic without lag is left alone.

Every test has its own namespace, topic and group (the Kafka cut its own broker), and stops its
processes at the end.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from groupops.consumer.audit import load_journals
from groupops.consumer.progress import EXIT_STUCK
from groupops.devstack import KafkaCluster, KafkaSettings
from groupops.planner.plan_format import lease_record, parse_micro_time
from tests.e2e.kube_api import KubeApi
from tests.e2e.operator_support import free_port
from tests.e2e.plan_driver import engine_target
from tests.e2e.runtime_support import (
    ConsumerProcess,
    CuttableProxy,
    ProducedLog,
    create_namespace,
    create_topic,
    produce,
    scrape,
)
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_runtime import LEASE_SECONDS, STARTUP_S, Group, owned_in_plan

pytestmark = pytest.mark.integration

INTERVAL_S = 6
"""maxPollIntervalSeconds of every replica here: low, so that a test waits seconds, not minutes."""
SLACK_S = 12.0
"""What a loaded 2-core machine may add to interval + lease duration (judging every 0.5 s, the
last renewal up to 1 s before, one API timeout, process scheduling, starting the poll)."""
POISON = b"poison"
STALL = "GROUPOPS_TEST_STALL"
REPO_ROOT = Path(__file__).resolve().parents[2]


def stall_on_poison(message: Any) -> None:
    """The test processor (`GROUPOPS_PROCESSOR=tests.integration.test_consumer_stuck:stall_on_poison`):
    blocks forever on the message `poison` in a process whose identity matches the pattern
    $GROUPOPS_TEST_STALL (fnmatch); every other message, and every other process, goes through."""
    pattern = os.environ.get(STALL)
    identity = os.environ.get("GROUPOPS_IDENTITY", "")
    if pattern and message.value() == POISON and fnmatch.fnmatchcase(identity, pattern):
        threading.Event().wait()


def stalling_env(pattern: str | None = None) -> dict[str, str]:
    """What makes a replica run `stall_on_poison`, stalling when its identity matches `pattern`."""
    env = {
        "GROUPOPS_PROCESSOR": f"{__name__}:stall_on_poison",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    if pattern is not None:
        env[STALL] = pattern
    return env


def watched_env(*, stall: str | None = None, metrics_port: int | None = None) -> dict[str, str]:
    """The environment of a replica under the watchdog here; `stall`: the identity that stalls."""
    env = {**stalling_env(stall), "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": str(INTERVAL_S)}
    if metrics_port is not None:
        env["GROUPOPS_METRICS_PORT"] = str(metrics_port)
    return env


def produce_poison(bootstrap: str, topic: str, partition: int, log: ProducedLog) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        log.acked.append((message.topic(), message.partition(), message.offset()))

    producer.produce(topic, POISON, partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0


def exit_of(process: ConsumerProcess, timeout: float) -> tuple[int, float]:
    """Wait for the process to end on its own: its exit code and the wall time it was seen gone."""
    assert process.process is not None
    try:
        code = process.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{process.identity} still running after {timeout:.0f} s\n{process.log_tail(30)}")
    return code, time.time()


def last_renewal(g: Group, identity: str) -> float:
    """Wall time of the Lease's last renewal, checking the process still held it (no release)."""
    lease = g.lease(identity)
    spec: dict[str, Any] = lease["spec"]  # type: ignore[assignment]
    assert spec.get("holderIdentity") == identity, "a stuck replica is judged expired, not released"
    return parse_micro_time(spec["renewTime"])


def stuck_metric(port: int) -> float | None:
    try:
        return scrape(port).get("groupops_consumer_stuck_total")
    except OSError:
        return None


def assert_failed_over(
    g: Group, identity: str, *, since: float, rule: str, metrics_port: int | None = None
) -> None:
    """`identity` (stuck from `since`, wall time) was judged stuck by `rule`, counted it, exited
    with EXIT_STUCK within interval + lease + slack, and had stopped renewing its Lease a lease
    duration before it exited (the operator's side has surely judged it expired by then)."""
    process = g.consumers[identity]
    bound = INTERVAL_S + LEASE_SECONDS + SLACK_S
    if metrics_port is not None:
        # Served from the stuck declaration until the exit (about a lease duration): look then.
        wait_for(
            "the stuck replica counting itself stuck",
            lambda: stuck_metric(metrics_port) == 1,
            bound,
            interval=0.1,
            explain=process.log_tail,
        )
    code, exited_at = exit_of(process, timeout=bound + 60)
    tail = process.log_tail(40)
    assert code == EXIT_STUCK, tail
    assert exited_at - since <= bound, f"exited {exited_at - since:.1f} s after it got stuck\n{tail}"
    renewed_at = last_renewal(g, identity)
    assert renewed_at + LEASE_SECONDS <= exited_at, "it stopped renewing a lease duration before exiting"
    assert rule in tail, tail
    print(
        f"\nstuck at {since:.1f}: last renewal +{renewed_at - since:.1f} s, exit +{exited_at - since:.1f} s "
        f"(interval {INTERVAL_S} s, lease {LEASE_SECONDS} s)"
    )


def new_group(
    api: KubeApi, *, bootstrap: str, kube_config: str, unique_name: Callable[[str], str], workdir: Path
) -> Group:
    namespace = unique_name("stuck")
    create_namespace(api, namespace)
    topic = unique_name("orders")
    create_topic(bootstrap, topic, 4)
    return Group(
        api=api,
        bootstrap=bootstrap,
        namespace=namespace,
        topic=topic,
        partitions=4,
        group_id=unique_name("processor"),
        workdir=workdir,
        kubeconfig=kube_config,
    )


@pytest.fixture
def group(
    kafka_bootstrap: str, kube_config: str, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Group]:
    api = KubeApi(kube_config)
    g = new_group(
        api, bootstrap=kafka_bootstrap, kube_config=kube_config, unique_name=unique_name, workdir=tmp_path
    )
    try:
        yield g
    finally:
        g.close()
        api.close()


# -- a broker that a test can cut one client from -----------------------------------------------


class BrokerProxy(CuttableProxy):
    """A CuttableProxy in front of a broker that advertises the proxy's address, so that every
    connection of its clients (bootstrap, partition leaders, group coordinator) passes through
    it and `cut()` cuts them from Kafka, while the API server stays reachable. The broker picks
    its own port only when it starts, after its configuration (holding the proxy's port) was
    written: the upstream is looked up per connection instead of fixed at construction."""

    def __init__(self, cluster: Callable[[], KafkaCluster | None]) -> None:
        self._cluster = cluster
        super().__init__("127.0.0.1", 0)

    @property  # type: ignore[override]
    def _upstream(self) -> tuple[str, int]:
        cluster = self._cluster()
        assert cluster is not None and cluster.nodes, "the broker has not planned its port yet"
        host, _, port = cluster.bootstrap.split(",")[0].rpartition(":")
        return host, int(port)

    @_upstream.setter
    def _upstream(self, value: tuple[str, int]) -> None:
        """CuttableProxy's constructor sets a fixed upstream; this proxy looks it up instead."""


@pytest.fixture
def cuttable_kafka(tmp_path: Path) -> Iterator[tuple[str, BrokerProxy]]:
    """A broker of the test's own behind a `BrokerProxy`: (its bootstrap, the proxy)."""
    holder: list[KafkaCluster] = []
    proxy = BrokerProxy(lambda: holder[0] if holder else None)
    cluster = KafkaCluster(
        tmp_path / "kafka",
        KafkaSettings(extra_config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}),
    )
    holder.append(cluster)
    try:
        cluster.start()
        yield cluster.bootstrap, proxy
    finally:
        proxy.close()
        cluster.stop()


# -- the tests ----------------------------------------------------------------------------------


def test_a_replica_whose_callback_never_returns_stops_renewing_and_exits_and_its_partitions_move(
    group: Group,
) -> None:
    g = group
    stuck, standby = g.identity(0), g.identity(1)
    g.start_driver(
        [stuck, standby],
        engine_target("failover", {g.topic: g.partitions}, priorities={stuck: 10, standby: 5}),
    )
    port = free_port()
    g.consumer(stuck, extra=watched_env(stall=stuck, metrics_port=port))
    g.consumer(standby, extra=watched_env(stall=stuck))
    wait_for(
        "the first replica owning everything", lambda: len(owned_in_plan(g, stuck)) == g.partitions, STARTUP_S
    )
    wait_for("both acknowledging", lambda: g.all_acked_current([stuck, standby]), STARTUP_S)
    produced = ProducedLog()
    produce(g.bootstrap, g.topic, 40, g.partitions, log=produced)
    g.wait_processed(produced.acked)

    poisoned_at = time.time()
    produce_poison(g.bootstrap, g.topic, 0, produced)
    produce(g.bootstrap, g.topic, 40, g.partitions, log=produced, prefix="after")
    assert_failed_over(
        g, stuck, since=poisoned_at, rule="main loop has not come back to poll", metrics_port=port
    )

    taken_over = wait_for(
        "the standby consuming",
        lambda: first_processed_by(g, standby, after=poisoned_at),
        60,
        explain=g.diagnostics,
    )
    # Only the takeover, not completeness: the stand-in publisher (plan_driver) judges liveness
    # by resourceVersion, so its own fence revives the dead holder for a lease duration and the
    # partitions flap back. The e2e test (the real operator) checks that every message arrives.
    report = g.audit(produced.acked)
    print(f"the standby consumed {taken_over - poisoned_at:.1f} s after the poison; {report.summary()}")
    assert taken_over - poisoned_at <= INTERVAL_S + LEASE_SECONDS + SLACK_S
    assert report.overlaps == []
    assert report.unexplained == []


def first_processed_by(g: Group, identity: str, *, after: float) -> float | None:
    starts = [
        r.start for r in load_journals(g.journal_dir).processed if r.identity == identity and r.start > after
    ]
    return min(starts) if starts else None


def test_a_replica_cut_from_kafka_but_not_from_the_api_server_stops_renewing_and_exits(
    cuttable_kafka: tuple[str, BrokerProxy],
    kube_config: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    bootstrap, kafka = cuttable_kafka
    api = KubeApi(kube_config)
    g = new_group(
        api, bootstrap=bootstrap, kube_config=kube_config, unique_name=unique_name, workdir=tmp_path
    )
    try:
        identity = g.identity(0)
        g.start_driver([identity], engine_target("range", {g.topic: g.partitions}))
        port = free_port()
        extra = {
            **watched_env(metrics_port=port),
            "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka.port}",
        }
        g.consumer(identity, extra=extra)
        wait_for("the replica acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
        produced = ProducedLog()
        produce(g.bootstrap, g.topic, 40, g.partitions, log=produced)
        g.wait_processed(produced.acked)

        cut_at = time.time()
        kafka.cut()
        assert_failed_over(
            g, identity, since=cut_at, rule="no broker round trip succeeded", metrics_port=port
        )
        assert not g.proxies[identity].is_cut, "the API server stayed reachable throughout"
    finally:
        g.close()
        api.close()


def test_a_replica_on_an_idle_topic_without_lag_is_not_judged_stuck(group: Group) -> None:
    g = group
    identity = g.identity(0)
    g.start_driver([identity], engine_target("range", {g.topic: g.partitions}))
    port = free_port()
    process = g.consumer(identity, extra=watched_env(metrics_port=port))
    wait_for("the replica acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
    produced = ProducedLog()
    produce(g.bootstrap, g.topic, 40, g.partitions, log=produced)
    g.wait_processed(produced.acked)

    time.sleep(3 * INTERVAL_S)  # idle: nothing arrives, nothing lags
    assert process.alive(), process.log_tail(30)
    samples = scrape(port)
    assert samples["groupops_consumer_stuck_total"] == 0
    assert samples["groupops_consumer_lease_valid"] == 1
    assert samples["groupops_consumer_partitions_owned"] == g.partitions
    record = lease_record(g.lease(identity)["metadata"]["annotations"])  # type: ignore[index]
    assert len(record.partitions) == g.partitions
    assert "stuck" not in process.log_tail(200)
    assert not [f for f in load_journals(g.journal_dir).fences() if f.identity == identity]


def test_a_native_replica_whose_callback_never_returns_exits_too(group: Group) -> None:
    g = group
    identity = g.identity(0)
    port = free_port()
    extra = {
        **watched_env(stall=identity, metrics_port=port),
        "GROUPOPS_DELIVERY": "native",
        "GROUPOPS_STRATEGY": "range",
        "GROUPOPS_TOPICS": g.topic,
        # librdkafka wants max.poll.interval.ms >= session.timeout.ms; 6 s is the broker's minimum.
        "GROUPOPS_KAFKA_PROPERTIES": '{"session.timeout.ms":"6000"}',
    }
    g.consumer(identity, extra=extra)
    produced = ProducedLog()
    produce(g.bootstrap, g.topic, 20, g.partitions, log=produced)
    g.wait_processed(produced.acked, timeout=STARTUP_S)

    poisoned_at = time.time()
    produce_poison(g.bootstrap, g.topic, 0, produced)
    assert_failed_over(
        g, identity, since=poisoned_at, rule="main loop has not come back to poll", metrics_port=port
    )
