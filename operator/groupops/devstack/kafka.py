"""Apache Kafka brokers for tests and the demo: the real broker from its Maven Central jars, in
KRaft combined mode (each node is broker and controller), on free 127.0.0.1 ports.

Who calls it: the pytest fixtures (tests/fixtures/stack.py) and `python -m groupops.devstack up`.

Steps of `KafkaCluster.start()`, in order:
1. pick ports and write one `server.properties` per node (static quorum of all nodes);
2. format each node's log directory with Kafka's own storage tool (`kafka.tools.StorageTool`);
3. start every node (`kafka.Kafka server.properties`) with a quiet log4j2 configuration, its
   output in `<node dir>/broker.log`, mapping the cached class-data-sharing archive when
   `record_class_data` has made one (half the start-up time on a busy machine);
4. ready when the Admin API answers `describe_cluster` with every node (and its rack, if set)
   and the group coordinator answers (so a test's first group call does not meet NOT_COORDINATOR).

`stop()` sends SIGTERM to every node at once (a combined node waits for its quorum while it shuts
down, so stopping them one by one would stall the last ones) and SIGKILLs stragglers.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from groupops.devstack import paths
from groupops.devstack.errors import StartError
from groupops.devstack.process import ManagedProcess, free_port, log_tail, port_taken

__all__ = ["KafkaCluster", "KafkaSettings", "class_data_archive", "rack_settings", "record_class_data"]

log = logging.getLogger(__name__)

# Warnings and errors only, plus the one line that says the server is up.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""

_FORMAT_TIMEOUT_S = 120.0
_START_ATTEMPTS = 3
_READINESS_GROUP = "groupops-devstack-readiness"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSettings:
    """What to start.

    brokers: number of combined broker+controller nodes (1 or 3 in practice).
    racks: `broker.rack` of each node, in node order; empty for none.
    sasl_users: when not empty, every node also listens with SASL_PLAINTEXT (mechanism PLAIN)
        for these user → password pairs, and the StandardAuthorizer is on; `super_users` (and
        the unauthenticated PLAINTEXT listener, which the nodes use between themselves) bypass
        ACLs, every other user is denied what no ACL grants.
    heap_mb: JVM heap ceiling per node; the broker needs far less than its 1 GiB default here.
    ready_timeout_s: how long start() waits for the Admin API (a cold JVM on a busy 2-core
        machine takes 10-30 s).
    extra_config: more broker properties, e.g. {"log.retention.ms": "1000"}.
    record_class_data: write the JVM's class-data-sharing archives into the cache at exit (see
        `record_class_data`); normal runs only map them.
    """

    brokers: int = 1
    racks: tuple[str, ...] = ()
    sasl_users: Mapping[str, str] = field(default_factory=dict)
    super_users: tuple[str, ...] = ("admin",)
    heap_mb: int = 512
    ready_timeout_s: float = 180.0
    extra_config: Mapping[str, str] = field(default_factory=dict)
    record_class_data: bool = False


def class_data_archive(kind: str) -> Path:
    """The cached class-data-sharing archive of the storage tool (`format`) or the broker."""
    return paths.cache_dir() / f"kafka-{paths.KAFKA_VERSION}" / "cds" / f"{kind}.jsa"


def record_class_data(workdir: Path) -> list[Path]:
    """Run one broker once with the JVM recording every class it loads (Java's dynamic AppCDS
    archive), so that later JVMs map those classes instead of loading and verifying them from
    46 jars: the broker is then ready in roughly half the time. `make stack` runs this once per
    Kafka version; an archive that no longer matches the classpath is ignored by the JVM."""
    cluster = KafkaCluster(workdir, KafkaSettings(record_class_data=True))
    cluster.start()
    cluster.stop()
    return [archive for archive in map(class_data_archive, ("format", "broker")) if archive.is_file()]


def rack_settings() -> KafkaSettings:
    """Three nodes in racks r1, r2, r3, for rack-aware tests."""
    return KafkaSettings(brokers=3, racks=("r1", "r2", "r3"))


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form: 16 bytes, URL-safe base64 without padding. Like
    Kafka's own Uuid.randomUuid, never one starting with '-' (the tools would read an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass(slots=True)
class _Node:
    node_id: int
    directory: Path
    port: int
    controller_port: int
    sasl_port: int | None
    process: ManagedProcess | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"


class KafkaCluster:
    """One KRaft cluster under `workdir` (created; each node in `workdir/node-<id>`)."""

    def __init__(self, workdir: Path, settings: KafkaSettings | None = None) -> None:
        self.workdir = workdir
        self.settings = settings or KafkaSettings()
        if self.settings.racks and len(self.settings.racks) != self.settings.brokers:
            raise ValueError(
                f"racks has {len(self.settings.racks)} entries for {self.settings.brokers} brokers"
            )
        self.nodes: list[_Node] = []
        self.start_seconds: float | None = None

    # -- addresses -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """`host:port,...` of the PLAINTEXT listeners."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def sasl_bootstrap(self) -> str | None:
        """`host:port,...` of the SASL_PLAINTEXT listeners, when `sasl_users` is set."""
        if not self.settings.sasl_users:
            return None
        return ",".join(f"127.0.0.1:{node.sasl_port}" for node in self.nodes)

    @property
    def log_paths(self) -> list[Path]:
        return [node.log_path for node in self.nodes]

    def processes(self) -> list[ManagedProcess]:
        return [node.process for node in self.nodes if node.process is not None]

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Format, start and wait for every node; on failure stop what started and raise
        StartError with the failing node's log. A port taken by someone else between our pick
        and the broker's bind is retried with new ports (up to 3 attempts)."""
        libs = paths.kafka_libs()
        java = paths.java_binary()
        began = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(libs, java)
                break
            except StartError as e:
                if attempt == _START_ATTEMPTS or not port_taken(e):
                    raise
                log.warning("kafka: attempt %d lost a port race (%s); retrying with new ports", attempt, e)
                for node in self.nodes:
                    shutil.rmtree(node.directory, ignore_errors=True)
        self.start_seconds = time.monotonic() - began
        log.info(
            "kafka: %d node(s) ready at %s in %.1f s", len(self.nodes), self.bootstrap, self.start_seconds
        )

    def _start_once(self, libs: Path, java: Path) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = [self._plan_node(node_id) for node_id in range(1, self.settings.brokers + 1)]
        for node in self.nodes:
            node.directory.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text(self._server_properties(node))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        classpath = f"{libs}/*"
        common = [
            f"-Xmx{self.settings.heap_mb}m",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]
        try:
            # The storage tool is short-lived: the JIT's top tier would only cost start-up time.
            tool_jvm = [str(java), *self._class_data_flags("format"), "-XX:TieredStopAtLevel=1", *common]
            self._format(tool_jvm, new_cluster_id())
            self._keep_recorded("format")
            broker_jvm = [str(java), *self._class_data_flags("broker"), *common]
            for node in self.nodes:
                node.process = ManagedProcess(
                    f"kafka node {node.node_id}",
                    [*broker_jvm, "kafka.Kafka", str(node.config_path)],
                    log_path=node.log_path,
                    cwd=node.directory,
                )
                node.process.start()
            self._wait_ready(time.monotonic() + self.settings.ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop every node (idempotent)."""
        if self.settings.record_class_data:
            timeout_s = max(timeout_s, 180.0)  # the JVM writes its archive on the way out
        for process in self.processes():
            process.terminate()
        for process in self.processes():
            process.stop(timeout_s)
        self._keep_recorded("broker")

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def rss(self) -> dict[str, int | None]:
        """Resident memory of each node's JVM, by process name."""
        return {process.name: process.rss() for process in self.processes()}

    # -- class data sharing ----------------------------------------------------------------

    def _class_data_flags(self, kind: str) -> list[str]:
        """Map the recorded archive of `kind` (format, broker) when there is one; in recording
        mode, have the JVM write a fresh one at exit instead (to a private name, see
        `_keep_recorded`)."""
        archive = class_data_archive(kind)
        if self.settings.record_class_data:
            archive.parent.mkdir(parents=True, exist_ok=True)
            return [f"-XX:ArchiveClassesAtExit={self._recording(kind)}"]
        return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []

    def _recording(self, kind: str) -> Path:
        return class_data_archive(kind).with_suffix(f".{os.getpid()}.tmp")

    def _keep_recorded(self, kind: str) -> None:
        # A rename, so that a concurrent start maps either the old archive or the new one.
        recording = self._recording(kind)
        if self.settings.record_class_data and recording.is_file():
            recording.replace(class_data_archive(kind))

    # -- steps -----------------------------------------------------------------------------

    def _plan_node(self, node_id: int) -> _Node:
        return _Node(
            node_id=node_id,
            directory=self.workdir / f"node-{node_id}",
            port=free_port(),
            controller_port=free_port(),
            sasl_port=free_port() if self.settings.sasl_users else None,
        )

    def _server_properties(self, node: _Node) -> str:
        count = self.settings.brokers
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        advertised = list(listeners)
        if node.sasl_port is not None:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
            advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
        listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            # Tests create their topics explicitly; an unknown topic must stay unknown.
            "auto.create.topics.enable": "false",
            # Internal topics sized for the node count; fewer offsets partitions start faster.
            "offsets.topic.replication.factor": str(count),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(count),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(count),
            "share.coordinator.state.topic.min.isr": "1",
            # A test's consumer group must not wait 3 s for more members to join.
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.settings.racks:
            props["broker.rack"] = self.settings.racks[node.node_id - 1]
        if self.settings.sasl_users:
            users = " ".join(
                f'user_{name}="{password}"' for name, password in sorted(self.settings.sasl_users.items())
            )
            props["sasl.enabled.mechanisms"] = "PLAIN"
            props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            )
            props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            # The nodes talk to each other unauthenticated (PLAINTEXT and CONTROLLER listeners).
            supers = ["User:ANONYMOUS", *(f"User:{name}" for name in self.settings.super_users)]
            props["super.users"] = ";".join(supers)
        props.update(self.settings.extra_config)
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _format(self, jvm: list[str], cluster_id: str) -> None:
        """Kafka's storage tool, once per node, all nodes at the same time."""
        running: list[tuple[_Node, subprocess.Popen[bytes]]] = []
        for node in self.nodes:
            with node.log_path.open("ab") as out:
                command = [
                    *jvm,
                    "kafka.tools.StorageTool",
                    "format",
                    "--config",
                    str(node.config_path),
                    "--cluster-id",
                    cluster_id,
                ]
                running.append(
                    (
                        node,
                        subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=node.directory),
                    )
                )
        for node, popen in running:
            try:
                code = popen.wait(timeout=_FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
                code = -9
            if code != 0:
                raise StartError(
                    f"kafka storage format of node {node.node_id} failed (code {code}); log "
                    f"{node.log_path}:\n{log_tail(node.log_path)}",
                    node.log_path,
                )

    def _wait_ready(self, deadline: float) -> None:
        # First the sockets (cheap, and it keeps librdkafka from logging refused connections),
        # then one Admin API round trip that must list every node.
        for node in self.nodes:
            assert node.process is not None
            node.process.wait_ready(
                functools.partial(_port_open, node.port),
                timeout_s=max(1.0, deadline - time.monotonic()),
                what=f"listening on 127.0.0.1:{node.port}",
            )
        first = self.nodes[0].process
        assert first is not None
        first.wait_ready(
            self._admin_sees_all_nodes,
            timeout_s=max(1.0, deadline - time.monotonic()),
            what=f"Admin API listing {len(self.nodes)} node(s)",
        )

    def _admin_sees_all_nodes(self) -> bool:
        # Imported here: the devstack CLI's `down` must work without loading librdkafka.
        from confluent_kafka import KafkaException  # noqa: PLC0415
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": log}
        admin = AdminClient(config)
        try:
            description = admin.describe_cluster(request_timeout=5).result(timeout=10)
            nodes = list(description.nodes)
            if len(nodes) != len(self.nodes):
                return False
            if self.settings.racks and sorted(str(n.rack) for n in nodes) != sorted(self.settings.racks):
                return False
            # The group coordinator too: the first group request creates __consumer_offsets, and
            # until its partitions have loaded, group calls answer NOT_COORDINATOR.
            admin.describe_consumer_groups([_READINESS_GROUP], request_timeout=5)[_READINESS_GROUP].result(
                timeout=10
            )
        except KafkaException:
            return False
        return True


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
