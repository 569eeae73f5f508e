"""What the demo (devstack/demo.py) runs around its scenario: the local stack (started here, or one
that already runs), kubectl from the project's build, the operator as a subprocess, and Kafka
helpers (topics, a skewed backlog, a steady writer).

Every process started here runs in a session of its own, so that a Ctrl-C in the terminal reaches
the demo alone, which then stops them in order (operator, replicas, Kafka, API server): the
caller owns each of these objects in a `with` or `try/finally`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupops.devstack import paths
from groupops.devstack.errors import DemoError, NotBuiltError
from groupops.devstack.kafka import KafkaCluster, KafkaSettings, class_data_archive
from groupops.devstack.kube import KubeApiServer
from groupops.devstack.kubelet import GROUPOPS
from groupops.devstack.process import free_port, log_tail

__all__ = [
    "Endpoints",
    "Kubectl",
    "OperatorRun",
    "Say",
    "SteadyWriter",
    "build_with_progress",
    "create_topics",
    "kubectl_binary",
    "local_stack",
    "no_interrupts",
    "produce_counts",
]

Say = Callable[[str], None]
"""Where the demo's lines for people go (stdout, flushed)."""

KUBETOOLS_DIR = "kubetools-helm3.18.6-k8s1.33.13-r2"
"""mk/helm.mk's cache directory of kubectl and helm (`make` exports it as $GROUPOPS_KUBETOOLS)."""
_KUBECTL_TIMEOUT_S = 60.0
_OPERATOR_STOP_S = 20.0


def kubectl_binary() -> Path:
    """kubectl as mk/helm.mk builds it: $GROUPOPS_KUBETOOLS/kubectl, else the cache's default
    directory; never a kubectl that happens to be on PATH (its version could be anything)."""
    configured = os.environ.get("GROUPOPS_KUBETOOLS")
    directory = Path(configured) if configured else paths.cache_dir() / KUBETOOLS_DIR
    binary = directory / "kubectl"
    if not os.access(binary, os.X_OK):
        raise NotBuiltError(f"kubectl not found at {binary}: run `make kubetools` (mk/helm.mk builds it)")
    return binary


# -- building it --------------------------------------------------------------------------------

_PROGRESS_EVERY_S = 30.0


def missing_components() -> list[tuple[str, str]]:
    """What `make stack kubetools` still has to fetch or build: (short name, what and how long
    the first time on 2 cores, the figures of mk/stack.mk and mk/helm.mk)."""
    missing: list[tuple[str, str]] = []
    try:
        paths.kafka_libs()
    except NotBuiltError:
        missing.append(
            ("Kafka jars", f"Apache Kafka {paths.KAFKA_VERSION}'s jars from Maven Central (1-3 min)")
        )
    if not class_data_archive("broker").is_file():
        missing.append(("Kafka CDS archive", "one broker run recording the JVM's class-data archive (30 s)"))
    try:
        paths.kube_apiserver_binary()
        paths.etcd_binary()
    except NotBuiltError:
        missing.append(
            (
                "kube-apiserver + etcd",
                f"kube-apiserver {paths.K8S_VERSION} and etcd {paths.ETCD_VERSION} built from their Go "
                "modules (15-25 min)",
            )
        )
    try:
        kubectl_binary()
    except NotBuiltError:
        missing.append(("kubectl + helm", "kubectl and helm built from their Go modules (5-10 min)"))
    return missing


def build_with_progress(argv: Sequence[str], *, say: Say) -> int:
    """Run the build command `argv` (its output goes through), after saying what is missing from
    the cache, and say every 30 s that it still runs: the Go builds print nothing for minutes.
    Returns its exit code (130 on Ctrl-C, which reaches the build too: it shares our terminal)."""
    missing = missing_components()
    if missing:
        say(f"first run: fetching and building into {paths.cache_dir()} (once; later runs reuse it):")
        for _, detail in missing:
            say(f"  - {detail}")
    began = time.monotonic()
    process = subprocess.Popen(list(argv))
    try:
        while True:
            try:
                return process.wait(timeout=_PROGRESS_EVERY_S)
            except subprocess.TimeoutExpired:
                minutes, seconds = divmod(int(time.monotonic() - began), 60)
                left = ", ".join(name for name, _ in missing_components()) or "finishing"
                say(f"  ... still building ({minutes}:{seconds:02d} elapsed; to do: {left})")
    except KeyboardInterrupt:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        if process.poll() is None:
            process.kill()
            process.wait()
        return 130


# -- the stack ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoints:
    """Where the stack answers. `own`: started by `local_stack` (and stopped by it)."""

    kubeconfig: str
    bootstrap: str
    own: bool


@contextlib.contextmanager
def local_stack(
    workdir: Path, *, kubeconfig: str | None = None, bootstrap: str | None = None, say: Say
) -> Iterator[Endpoints]:
    """One Kafka broker and the API server with etcd, side by side, under `workdir`; stopped when
    the block ends, however it ends. With both `kubeconfig` and `bootstrap` given, that stack is
    used as it is and nothing is started."""
    if kubeconfig and bootstrap:
        say(f"using the running stack: Kafka at {bootstrap}, API server of {kubeconfig}")
        yield Endpoints(kubeconfig=kubeconfig, bootstrap=bootstrap, own=False)
        return
    if kubeconfig or bootstrap:
        raise DemoError("give both --kubeconfig and --bootstrap-server (a running stack), or neither")
    cluster = KafkaCluster(workdir / "kafka", KafkaSettings(brokers=1))
    apiserver = KubeApiServer(workdir / "kube")
    say(
        f"starting the local stack: Apache Kafka {paths.KAFKA_VERSION} (one KRaft broker), "
        f"kube-apiserver {paths.K8S_VERSION} + etcd {paths.ETCD_VERSION}"
    )
    try:
        # Side by side: each mostly waits on its own JVM or Go process. Leaving this block waits
        # for both starts to end (also on Ctrl-C), so that `finally` stops what they started.
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            started = [pool.submit(server.start) for server in (cluster, apiserver)]
            for future in started:
                future.result()
        say(
            f"Kafka at {cluster.bootstrap} (ready in {cluster.start_seconds or 0:.1f} s), API server at "
            f"{apiserver.server_url} (ready in {apiserver.start_seconds or 0:.1f} s)"
        )
        yield Endpoints(kubeconfig=str(apiserver.kubeconfig), bootstrap=cluster.bootstrap, own=True)
    finally:
        with no_interrupts():
            cluster.stop()
            apiserver.stop()
        say("stopped Kafka, the API server and etcd")


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """Ctrl-C is ignored inside (while stopping what was started: a second Ctrl-C must not
    leave processes behind). Only the main thread can change signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# -- kubectl ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kubectl:
    binary: Path
    kubeconfig: str

    def run(self, *args: str, stdin: str | None = None) -> str:
        """kubectl's stdout; DemoError with its stderr when it fails."""
        try:
            result = subprocess.run(
                [str(self.binary), "--kubeconfig", self.kubeconfig, *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=_KUBECTL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise DemoError(f"kubectl {' '.join(args)} did not answer in {_KUBECTL_TIMEOUT_S:.0f} s") from e
        if result.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


# -- the operator -------------------------------------------------------------------------------


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class OperatorRun:
    """`groupops operator` watching one namespace, its output in `log_path`. Consumers send it
    heartbeats on a UDP port of its own (the chart's default liveness mode)."""

    def __init__(self, *, kubeconfig: str, namespace: str, log_path: Path, tick_s: float) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        heartbeat = _free_udp_port()
        self.argv = [
            GROUPOPS,
            "operator",
            "--namespace",
            namespace,
            "--tick",
            f"{tick_s:g}",
            "--health-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--heartbeat-port",
            str(heartbeat),
            "--heartbeat-address",
            f"127.0.0.1:{heartbeat}",
        ]
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def command(self) -> str:
        return " ".join(["groupops", *self.argv[1:]])

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                env={**os.environ, "KUBECONFIG": self.kubeconfig},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def started(self) -> bool:
        return self._popen is not None

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_code(self) -> int | None:
        """The process's exit code (negative: the signal that ended it); None while it runs."""
        return None if self._popen is None else self._popen.poll()

    def stop(self) -> None:
        """SIGTERM, repeated every second (a SIGTERM in the half second while kopf starts its
        loop is lost: seen when Ctrl-C comes right after the start), SIGKILL after a grace
        period. Idempotent."""
        if self._popen is None:
            return
        deadline = time.monotonic() + _OPERATOR_STOP_S
        while self._popen.poll() is None and time.monotonic() < deadline:
            self._popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1.0)
        if self._popen.poll() is None:
            self._popen.kill()
            self._popen.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)


# -- Kafka --------------------------------------------------------------------------------------


def create_topics(bootstrap: str, topics: Mapping[str, int], *, timeout_s: float = 60.0) -> None:
    """Create each topic with its partition count (replication 1) and wait until the metadata
    shows every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, count, 1) for name, count in topics.items()])
    try:
        for future in futures.values():
            future.result(timeout=timeout_s)
    except KafkaException as e:
        raise DemoError(f"cannot create topics {sorted(topics)} on {bootstrap}: {e}") from e
    deadline = time.monotonic() + timeout_s
    for name, count in topics.items():
        while len(admin.list_topics(name, timeout=10).topics[name].partitions) != count:
            if time.monotonic() > deadline:
                raise DemoError(f"topic {name} does not show {count} partitions after {timeout_s:.0f} s")
            time.sleep(0.2)


def produce_counts(bootstrap: str, topic: str, counts: Sequence[int], *, prefix: str = "m") -> int:
    """`counts[p]` messages to partition p, all acknowledged; returns how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    for partition, count in enumerate(counts):
        for i in range(count):
            while True:
                try:
                    producer.produce(
                        topic,
                        f"{prefix}-{partition}-{i}".encode(),
                        partition=partition,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            if i % 1000 == 0:
                producer.poll(0)
    if producer.flush(60) != 0 or failed:
        raise DemoError(f"could not write every message to {topic}: {failed[:1] or 'flush timed out'}")
    return sum(counts)


class SteadyWriter:
    """Writes about `rate` messages per second, round robin over `partitions`, in a thread until
    `stop()`: the traffic that keeps arriving while a replica fails."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float) -> None:
        self._args = (bootstrap, topic, partitions, rate)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)
        self.sent = 0
        self.failed = 0

    def start(self) -> SteadyWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        bootstrap, topic, partitions, rate = self._args
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                self.failed += 1

        started = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(BufferError):
                producer.produce(
                    topic, f"w-{self.sent}".encode(), partition=self.sent % partitions, on_delivery=delivered
                )
                self.sent += 1
            producer.poll(0)
            ahead = self.sent / rate - (time.monotonic() - started)
            if ahead > 0:
                self._stop.wait(ahead)
        producer.flush(10)
