"""Shared pieces of the consumer-runtime tests and the failover benchmark: `groupops consume` as a
subprocess, a TCP proxy to the API server that a test can cut, Kafka helpers, and waiting.

The in-test stand-in for the operator's publish step is in plan_driver.py; the kubelet harness
in kubelet.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.kube_api import KubeApi
from tests.e2e.waiting import wait_for

GROUPOPS = str(Path(sys.executable).parent / "groupops")


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


# -- a cuttable path to the API server ----------------------------------------------------------


class CuttableProxy:
    """A TCP relay on 127.0.0.1 in front of the API server. `cut()` drops every connection and
    black-holes new ones (accepted, never answered: clients hang until their own timeouts, as
    behind a dead network path); `restore()` relays again."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            doomed = list(self._sockets)  # black-holed while cut: let their clients retry
            self._sockets.clear()
        for sock in doomed:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.add(client)
                cut = self._cut
            if cut:
                continue  # black hole: hold the connection, say nothing
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)  # a watch is silent for long stretches
            with self._lock:
                self._sockets.add(upstream)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self._cut:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with self._lock:
                    self._sockets.discard(sock)
                _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def proxied_kubeconfig(kubeconfig: str, proxy: CuttableProxy, path: Path) -> str:
    """A copy of `kubeconfig` whose server is the proxy (same TLS name: 127.0.0.1)."""
    document = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return str(path)


def api_server_address(kubeconfig: str) -> tuple[str, int]:
    document = yaml.safe_load(Path(kubeconfig).read_text())
    server = document["clusters"][0]["cluster"]["server"]
    host_port = server.split("://", 1)[1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    return host, int(port)


# -- consumer processes -------------------------------------------------------------------------


@dataclass
class ConsumerProcess:
    """`groupops consume` for one identity, as the kubelet would run it. `env` is the pod's
    environment; the test adds KUBECONFIG (through a cuttable proxy) and the journal directory."""

    identity: str
    env: Mapping[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        assert not self.alive(), f"{self.identity} is already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n==== start {self.starts}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [GROUPOPS, "consume"],
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crash; waits until the process is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def terminate(self, grace: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


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
