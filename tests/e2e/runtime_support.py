"""Shared pieces of the consumer-runtime tests and the failover benchmark: Kafka helpers, the
consumer's environment, metrics scraping, and waiting. `groupops consume` as a subprocess and the
cuttable TCP proxy to the API server live with the kubelet harness in groupops.devstack
(kubelet.py, proxy.py); they are re-exported here for the tests that import them from here.

The in-test stand-in for the operator's publish step is in plan_driver.py.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from groupops.devstack.kube_api import KubeApi
from groupops.devstack.kubelet import ConsumerProcess
from groupops.devstack.proxy import CuttableProxy, api_server_address, proxied_kubeconfig  # noqa: F401
from tests.e2e.waiting import wait_for

# -- Kafka ----------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
    wait_for(
        f"topic {topic} with {partitions} partitions",
        lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == partitions,
    )


@dataclass
class ProducedLog:
    """(topic, partition, offset) of every message the broker acknowledged."""

    acked: list[tuple[str, int, int]] = field(default_factory=list)
    failed: int = 0


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, *, log: ProducedLog, prefix: str = "m"
) -> None:
    """`count` messages with unique ids, round robin over the partitions, all acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            log.acked.append((message.topic(), message.partition(), message.offset()))
        else:
            log.failed += 1

    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, f"{prefix}-{i}".encode(), partition=i % partitions, on_delivery=delivered
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "producer could not deliver everything"


class SteadyProducer:
    """Produces `total` messages at about `rate` per second in a thread (a workload that keeps
    arriving while the plan changes)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        total: int,
        rate: float,
        hot_share: float = 0.0,
        hot_rotation_s: float = 20.0,
    ) -> None:
        self.log = ProducedLog()
        self._args = (bootstrap, topic, total, rate)
        self.partitions = partitions
        """How many partitions the next messages spread over (`grow` raises it mid-run)."""
        # Skew: `hot_share` of the messages go to a quarter of the partitions, a different
        # quarter every `hot_rotation_s` seconds, so lag (and the lag-driven plan) keeps moving.
        self._hot_share = hot_share
        self._hot_rotation_s = hot_rotation_s
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.done = threading.Event()

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def grow(self, partitions: int) -> None:
        """Spread the next messages over `partitions` (the topic was given more)."""
        self.partitions = partitions

    def _run(self) -> None:
        bootstrap, topic, total, rate = self._args
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.log.acked.append((message.topic(), message.partition(), message.offset()))
            else:
                self.log.failed += 1

        started = time.monotonic()
        chooser = random.Random(7)
        for i in range(total):
            partitions = self.partitions
            quarter = max(1, partitions // 4)
            partition = i % partitions
            if self._hot_share and chooser.random() < self._hot_share:
                rotation = int((time.monotonic() - started) / self._hot_rotation_s)
                partition = (rotation * quarter + chooser.randrange(quarter)) % partitions
            while True:
                try:
                    producer.produce(topic, f"id-{i}".encode(), partition=partition, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as e:
                    if e.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                        raise
                    # The topic grew (`grow`): learn its new partitions, then produce.
                    producer.list_topics(topic, timeout=10)
            if i % 20 == 0:  # pace finely: bursts would make the work lost per crash depend on phase
                producer.poll(0)
                ahead = i / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        producer.flush(120)
        self.done.set()

    def wait(self, timeout: float = 600.0) -> ProducedLog:
        assert self.done.wait(timeout), "the producer did not finish"
        assert self.log.failed == 0, f"{self.log.failed} messages were not delivered"
        return self.log


# -- consumer processes -------------------------------------------------------------------------


def consumer_env(
    *,
    policy: str,
    identity: str,
    namespace: str,
    group_id: str,
    bootstrap: str,
    kubeconfig: str,
    record_dir: Path,
    lease_seconds: int,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment the operator gives a consumer pod (controller/render_pods.py), plus the
    test's KUBECONFIG and journal directory."""
    return {
        "GROUPOPS_POLICY": policy,
        "GROUPOPS_IDENTITY": identity,
        "GROUPOPS_NAMESPACE": namespace,
        "GROUPOPS_GROUP_ID": group_id,
        "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "GROUPOPS_LEASE_DURATION_SECONDS": str(lease_seconds),
        "GROUPOPS_RECORD_DIR": str(record_dir),
        "KUBECONFIG": kubeconfig,
        **(extra or {}),
    }


def create_namespace(api: KubeApi, name: str) -> None:
    api.create("Namespace", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The ServiceAccount admission plugin may want the namespace's default account before any
    # pod; no controller-manager runs here to create it.
    api.create(
        "ServiceAccount",
        name,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )


def lease_annotations(api: KubeApi, namespace: str, name: str) -> dict[str, str]:
    lease = api.get("Lease", namespace, name)
    return dict(((lease or {}).get("metadata") or {}).get("annotations") or {})


def stop_all(processes: Iterable[ConsumerProcess]) -> None:
    for process in processes:
        process.terminate(grace=30)


def scrape(port: int | str) -> dict[str, float]:
    """The unlabelled samples a consumer replica serves on /metrics (name -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def total(port: int | str, name: str, **labels: str) -> float:
    """The sum of the samples `name` with `labels` served on /metrics at `port`."""
    return series(port, (name,), **labels).get(name, 0.0)


def series(port: int | str, names: Sequence[str], **labels: str) -> dict[str, float]:
    """Each of `names` with `labels` served on /metrics at `port`, summed over its other labels,
    from one scrape; a name with no such sample is left out."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names and all(sample.labels.get(k) == v for k, v in labels.items()):
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


class CommittedOffsets:
    """Reads the group's committed offsets of `partitions` partitions every `every_s` in a thread
    (tests/e2e/test_handoff_churn.py reads every partition of a topic that grows, through the Admin
    API); `regressions` lists (partition, before, after) for every committed offset that went down
    between two reads. A failed read (the coordinator is
    moving) is only a missed sample.

    It reads through a consumer of the group that never joins, assigns or commits (an OffsetFetch
    of its own), not through the Admin API: `list_consumer_group_offsets` meeting the killed
    coordinator's dropped connection aborts the test process (tests/integration/
    test_consumer_coordinator_move.py, `coordinator_of`)."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, partitions: int, *, every_s: float) -> None:
        self._reader = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
        )
        self._partitions = [KafkaPartition(topic, p) for p in range(partitions)]
        self.highest: dict[int, int] = {}
        self.regressions: list[tuple[int, int, int]] = []
        self.reads: list[float] = []
        self.failed_reads = 0
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-offsets", daemon=True)

    def start(self) -> CommittedOffsets:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._reader.close()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                answer = self._reader.committed(self._partitions, timeout=5)
            except KafkaException:
                self.failed_reads += 1
                continue
            self.reads.append(time.time())
            for tp in answer:
                if tp.error is not None or tp.offset < 0:
                    continue
                before = self.highest.get(tp.partition, -1)
                if tp.offset < before:
                    self.regressions.append((tp.partition, before, tp.offset))
                self.highest[tp.partition] = max(before, tp.offset)
