"""A Spark Connect server for tests: PySpark's own installation (`bin/spark-submit` with the
bundled `jars/spark-connect_2.13-*.jar`), a `local[N]` Spark inside it, gRPC on a free 127.0.0.1
port. Clients reach it at `sc://127.0.0.1:<port>` (`SessionSettings.remote`, the CLI's
`--remote`).

Who calls it: the pipeline tests (tests/pipeline/conftest.py, one server per test session).

Steps of `SparkConnectServer.start()`:
1. pick a free loopback port and a work directory (its log, Spark's scratch space);
2. run `spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer
   spark-internal` (what Spark's `sbin/start-connect-server.sh` runs) with
   `spark.connect.grpc.binding.address=127.0.0.1` and that port;
3. ready when the port accepts a connection. A server that exits first raises StartError with
   its log's tail; a port lost between our pick and the server's bind is retried with a new one.
`stop()` sends SIGTERM to the server's process group (its Python workers are in it), then
SIGKILL to what is left.

The server runs Python UDFs (`mapInPandas` in `plan` and `backtest`) on the Python its
environment names (`PYSPARK_PYTHON`): a client cannot choose it, only ship files to it
(`SparkSession.addArtifacts`). `SparkConnectSettings.python` is that Python; the tests give it the
executor venv without groupops (spark_cluster.executor_python), so a UDF imports groupops only if
the client shipped the wheel.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from groupops.devstack import paths
from groupops.devstack.errors import NotBuiltError, StartError
from groupops.devstack.process import ManagedProcess, free_port, port_taken, signal_group
from groupops.devstack.spark_cluster import spark_home

__all__ = ["SERVER_CLASS", "SparkConnectServer", "SparkConnectSettings"]

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_START_ATTEMPTS = 3

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkConnectSettings:
    """The server's shape.

    master: the Spark inside the server; `local[2]` uses both cores of the test machine.
    driver_memory: the server JVM's heap, which holds the local executors too (as the pipeline
        tests' own local session: 2g).
    shuffle_partitions: 4 per core, as `SessionSettings` gives a local master.
    python: the Python its UDFs run (PYSPARK_PYTHON); None: this interpreter.
    ready_timeout_s: JVM start and gRPC bind on a loaded 2-core machine (about 15 s idle).
    """

    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = 8
    python: str | None = None
    ready_timeout_s: float = 120.0


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class SparkConnectServer:
    """One Spark Connect server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, workdir: Path, settings: SparkConnectSettings | None = None) -> None:
        self.workdir = workdir
        self.settings = settings or SparkConnectSettings()
        self.port: int | None = None
        self.process: ManagedProcess | None = None
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        """The URL a client connects to: sc://127.0.0.1:<port>."""
        if self.port is None:
            raise RuntimeError("the Spark Connect server was never started")
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def start(self) -> None:
        """Start the server and wait until its port accepts connections; on failure stop it and
        raise StartError with its log's tail (NotBuiltError without Java or the Connect jar)."""
        home = spark_home()
        paths.java_binary()  # NotBuiltError early, with a clear message, when Java is missing
        if not any((home / "jars").glob("spark-connect_*.jar")):
            raise NotBuiltError(f"no spark-connect jar in PySpark's installation at {home / 'jars'}")
        began = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(home)
                break
            except StartError as e:
                if attempt == _START_ATTEMPTS or not port_taken(e):
                    raise
                log.warning("spark connect: attempt %d lost a port race (%s); retrying", attempt, e)
        self.start_seconds = time.monotonic() - began
        log.info("spark connect: %s in %.1f s", self.url, self.start_seconds)

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "SPARK_HOME"}}
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
            SPARK_CONF_DIR=str(self.workdir / "conf"),  # an empty one: no site defaults leak in
            PYSPARK_PYTHON=self.settings.python or sys.executable,
        )
        return env

    def _start_once(self, home: Path) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "conf").mkdir(exist_ok=True)
        (self.workdir / "local").mkdir(exist_ok=True)
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        self.port = free_port()
        properties = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": self.settings.driver_memory,
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(self.settings.shuffle_partitions),
        }
        argv = [str(home / "bin" / "spark-submit"), "--master", self.settings.master, "--class", SERVER_CLASS]
        for key, value in properties.items():
            argv += ["--conf", f"{key}={value}"]
        argv += ["--name", "groupops-connect", "spark-internal"]
        self.process = ManagedProcess(
            "spark connect server",
            argv,
            log_path=self.log_path,
            env=self._environment(),
            cwd=self.workdir,
            own_session=False,  # at the caller's priority (devstack/process.py)
        )
        try:
            self.process.start()
            port = self.port
            self.process.wait_ready(
                lambda: _accepts(port), timeout_s=self.settings.ready_timeout_s, what=f"gRPC on {self.url}"
            )
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server and whatever it started (idempotent): SIGTERM to its process group,
        SIGKILL to the group after `timeout_s`."""
        if self.process is None:
            return
        group = None
        with contextlib.suppress(RuntimeError):
            group = self.process.pid  # a group of its own: the pid is the group id
        if group is not None:
            signal_group(group, signal.SIGTERM)
        self.process.stop(timeout_s)
        if group is not None:
            signal_group(group, signal.SIGKILL)  # Python workers left behind

    def __enter__(self) -> SparkConnectServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
