"""A release commit that has to ride out a group coordinator move (design §9.1, "Release commits"),
against a real 3-broker cluster of the test's own: plan-delivery replicas (`groupops consume`)
hand partitions over while the broker that coordinates their group is killed, and nothing is
lost, no partition has two owners at once, and the group's committed offsets never go backwards.

The cluster replicates `__consumer_offsets` and the test topic three times (min.insync.replicas
2), so with one broker down the group's coordinator moves to another broker once the controller
fences the dead one (`broker.session.timeout.ms`) and the producer keeps writing. The broker is
SIGKILLed a moment before the replan is published, so every release commit of that replan
starts against a dead coordinator; by the design it is retried (doubling backoff) until the
coordinator has moved, the Lease is no longer valid, or GROUPOPS_RELEASE_COMMIT_SECONDS passes.
The test asserts what must hold whatever the outcome (nothing missing, no overlap, committed
offsets never lower than before, each release journaled: `release`, after `release-uncommitted`
with its reason when the commit gave up) and prints what each release did: its outcome, what the
replica logged about it, its release-commit counters, and whether its journaled commits back a
release counted as committed. The broker is started again afterwards, so the cluster stops
cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from groupops.consumer.audit import load_journals
from groupops.devstack import KafkaCluster, KafkaSettings
from tests.e2e.plan_driver import engine_target
from tests.e2e.runtime_support import CommittedOffsets, SteadyProducer
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_runtime import STARTUP_S, Group, owned_in_plan

pytestmark = pytest.mark.integration

PARTITIONS = 6
SAMPLE_EVERY_S = 0.3
# The controller fences a silent broker after broker.session.timeout.ms (Kafka's default is 9 s);
# 6 s keeps the coordinator move, and so the test, shorter while staying far above the
# heartbeat interval on a busy 2-core machine.
SESSION_TIMEOUT_MS = 6000
RELEASE_LINES = re.compile(
    r"(release commit attempt \d+ failed: .*"
    r"|releasing \d+ partitions uncommitted after .*"
    r"|not committing \d+ recently assigned partitions: .*)"
)


# -- the cluster ------------------------------------------------------------------------------


def replicated_settings() -> KafkaSettings:
    return KafkaSettings(
        brokers=3,
        extra_config={
            "offsets.topic.replication.factor": "3",
            "min.insync.replicas": "2",
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": "1000",
        },
    )


def create_replicated_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(timeout=60)
    wait_for(
        f"topic {topic} with {partitions} partitions, 3 replicas each",
        lambda: all(
            len(p.replicas) == 3 and len(p.isrs) == 3
            for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        ),
    )


def coordinator_of(admin: AdminClient, group_id: str) -> int:
    """The node id of the broker coordinating `group_id` (plan-delivery replicas are no members,
    but they commit, so the group exists and has a coordinator). Only while every broker is up:
    librdkafka (2.16) aborts the whole process when a coordinator-bound Admin request meets a
    dropped connection (confluentinc/librdkafka#4605)."""
    description = admin.describe_consumer_groups([group_id], request_timeout=10)[group_id].result(timeout=15)
    return int(description.coordinator.id)


def coordinator_or_none(bootstrap: str, group_id: str) -> int | None:
    """`coordinator_of` through a new client, None on an error. A new one: the client that had
    found the old coordinator was seen getting NOT_COORDINATOR for 30 s after the move."""
    try:
        return coordinator_of(AdminClient({"bootstrap.servers": bootstrap}), group_id)
    except KafkaException:
        return None


def kill_broker(cluster: KafkaCluster, node_id: int) -> None:
    """SIGKILL one node (a crash: no controlled shutdown, no leadership handed over) and reap it."""
    process = cluster.nodes[node_id - 1].process
    assert process is not None and process.alive()
    os.kill(process.pid, signal.SIGKILL)
    process.stop(timeout_s=10)


def restart_broker(cluster: KafkaCluster, node_id: int) -> None:
    """Start the killed node again with its own configuration, ports and log directory."""
    process = cluster.nodes[node_id - 1].process
    assert process is not None and not process.alive()
    process.start()


def all_brokers_up(admin: AdminClient) -> bool:
    try:
        return len(admin.describe_cluster(request_timeout=5).result(timeout=10).nodes) == 3
    except KafkaException:
        return False


# -- what the group's committed offsets did ---------------------------------------------------


# -- the replicas' own account ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def release_commit_counts(port: int) -> dict[str, float]:
    """groupops_consumer_release_commits_total by outcome, scraped from a replica."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "groupops_consumer_release_commits_total"
    }


def release_lines_logged(log_path: Path) -> list[str]:
    """What the replica logged about its release commits: failed attempts, an uncommitted release,
    partitions the late-commit guard left out because the group's offsets could not be read."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return [m.group(1)[:160] for m in RELEASE_LINES.finditer(text)]


def commits_not_journaled(g: Group, identity: str, released: list[str], at: float) -> dict[str, object]:
    """For a release journaled as committed: the released partitions whose last journaled commit
    by `identity` (up to the release) is below what it processed of them; empty when the journal
    agrees with the outcome."""
    journals = load_journals(g.journal_dir)
    disagreeing: dict[str, object] = {}
    for name in released:
        topic, _, number = name.rpartition("-")
        partition = int(number)
        processed = [
            r.offset + 1
            for r in journals.processed
            if r.identity == identity and r.topic == topic and r.partition == partition and r.end <= at
        ]
        committed = [
            offset for when, offset in journals.commits.get((identity, topic, partition), []) if when <= at
        ]
        if processed and (not committed or committed[-1] < max(processed)):
            disagreeing[name] = {"processed up to": max(processed), "last journaled commit": committed[-1:]}
    return disagreeing


# -- the test ---------------------------------------------------------------------------------


@pytest.fixture
def cluster(kafka_cluster_factory: Callable[[KafkaSettings], KafkaCluster]) -> KafkaCluster:
    return kafka_cluster_factory(replicated_settings())


@pytest.fixture
def replicated_group(cluster: KafkaCluster, make_group: Callable[..., Group]) -> Group:
    """A Group on this test's own cluster, its topic replicated."""
    return make_group(PARTITIONS, bootstrap=cluster.bootstrap, new_topic=create_replicated_topic)


def test_a_release_during_a_coordinator_move_loses_nothing_and_never_moves_offsets_backwards(
    cluster: KafkaCluster, replicated_group: Group
) -> None:
    g = replicated_group
    began = time.monotonic()
    identities = [g.identity(i) for i in range(3)]
    topics = {g.topic: g.partitions}
    driver = g.start_driver(identities, engine_target("range", topics))
    ports = {identity: free_port() for identity in identities}
    for identity in identities:
        g.consumer(identity, extra={"GROUPOPS_METRICS_PORT": str(ports[identity])})
    ranged = engine_target("range", topics)(identities)
    wait_for(
        "3 replicas acknowledging the range plan of all three",
        lambda: driver.settled(ranged) and g.all_acked_current(identities),
        STARTUP_S,
    )
    before = {identity: set(owned_in_plan(g, identity)) for identity in identities}

    producer = SteadyProducer(g.bootstrap, g.topic, g.partitions, total=3000, rate=100).start()
    offsets = CommittedOffsets(g.bootstrap, g.group_id, g.topic, g.partitions, every_s=SAMPLE_EVERY_S).start()
    wait_for("every partition committed", lambda: len(offsets.highest) == g.partitions, 30)
    time.sleep(3.0)  # a few commit intervals of progress to hand over
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    coordinator = coordinator_of(admin, g.group_id)

    # Range -> round robin moves one partition away from every replica. The coordinator dies
    # first and the target changes at once: the release epoch is published within one driver
    # period (0.2 s), so every release commit starts while the coordinator is gone.
    target = engine_target("roundrobin", topics)
    expected = target(identities)
    killed_at = time.time()
    kill_broker(cluster, coordinator)
    driver.target = target
    changed_at = time.time()
    releasing = {
        identity: sorted(str(tp) for tp in before[identity] - set(expected[identity]))
        for identity in identities
    }
    assert all(releasing.values()), f"the replan moves a partition away from every replica: {releasing}"

    wait_for(
        "the round robin plan applied across the coordinator move",
        lambda: driver.settled(expected) and g.all_acked_current(identities),
        60,
        explain=g.diagnostics,
    )
    settled_at = time.time()
    restart_broker(cluster, coordinator)

    produced = producer.wait(timeout=120).acked
    report = g.wait_processed(produced, timeout=90)
    wait_for("the killed broker back in the cluster", lambda: all_brokers_up(admin), 90)
    # Leadership moves back to a preferred replica only at the controller's imbalance check
    # (every 300 s): the coordinator found now is the one the group moved to.
    moved_to = wait_for("the group's coordinator", lambda: coordinator_or_none(g.bootstrap, g.group_id), 30)
    time.sleep(2 * SAMPLE_EVERY_S + 1.0)  # the replicas' last commits, read at least once
    offsets.stop()

    events = load_journals(g.journal_dir).events
    print(
        f"\ncoordinator node {coordinator} killed {changed_at - killed_at:.3f} s before the target "
        f"changed; coordinator moved to node {moved_to}; plan settled {settled_at - killed_at:.1f} s "
        f"after the kill; {report.summary()}; committed-offset reads {len(offsets.reads)} "
        f"({offsets.failed_reads} failed); whole test {time.monotonic() - began:.1f} s"
    )
    for identity in identities:
        mine = [e for e in events if e.get("i") == identity and e["w"] > killed_at]
        released = [e for e in mine if e["k"] == "release"]
        uncommitted = [e for e in mine if e["k"] == "release-uncommitted"]
        assert released and released[0]["parts"] == releasing[identity], (
            f"{identity} journaled the release of {releasing[identity]}: {released}"
        )
        assert all(e["why"] for e in uncommitted), f"an uncommitted release says why: {uncommitted}"
        if uncommitted:
            outcome = f"release-uncommitted {uncommitted[0]['parts']}: {uncommitted[0]['why']}"
        else:
            # A release counted as committed is backed by a journaled commit of what was processed
            # (the release commit retried until the coordinator had moved).
            unconfirmed = commits_not_journaled(g, identity, releasing[identity], released[0]["w"])
            assert not unconfirmed, (
                f"{identity} counted its release committed without a commit: {unconfirmed}"
            )
            outcome = "release committed"
        print(
            f"  {identity}: released {releasing[identity]} {released[0]['w'] - changed_at:.1f} s after "
            f"the replan; {outcome}; logged {release_lines_logged(g.consumers[identity].log_path)}; "
            f"release commits {release_commit_counts(ports[identity])}"
        )

    assert moved_to != coordinator
    assert report.missing == []
    assert report.overlaps == []
    assert offsets.regressions == [], f"committed offsets moved backwards: {offsets.regressions}"
    assert any(t > settled_at for t in offsets.reads), "the committed offsets were read after the move"
