"""A real Spark standalone cluster for tests and benchmarks: one master and two workers started
from PySpark's own installation (`<pyspark>/bin/spark-class`), loopback only, plus the two things
a cluster's executors need that `local[*]` never does: the `groupops` package shipped as users
ship it, and a Python of their own.

Who calls it: the pipeline tests (tests/pipeline/conftest.py) and benchmarks/pipeline_cluster.py.

Steps of `SparkCluster.start()`, in order:
1. pick free 127.0.0.1 ports (RPC and web UI of every daemon) and a work directory each;
2. start the master (`org.apache.spark.deploy.master.Master --host 127.0.0.1`), ready when its
   web UI serves `/json/`;
3. start the workers (`org.apache.spark.deploy.worker.Worker`, `--cores 1 --memory 1g` each,
   executors' scratch space under the work directory), ready when the master's `/json/` lists
   every one of them ALIVE. A daemon that exits or a worker that never registers raises
   StartError with the tail of its log; a port lost between our pick and the daemon's bind is
   retried with new ports.
`stop()` sends SIGTERM to every daemon's process group (a worker's executors and their Python
workers are in its group), then SIGKILL to what is left.

Shipping (docs/pipeline.md, "Run on a cluster"):
- `package_zip()` builds the project's wheel (`pip wheel --no-deps`, from a copy of the sources,
  so the checkout gets no build/ directory) and keeps it, under a `.zip` name, in
  `$GROUPOPS_CACHE/spark/`, keyed by a digest of the sources: PySpark puts only `.zip`, `.egg`
  and `.jar` py-files on the executors' path, and a wheel of pure Python is a zip archive.
- `executor_python()` is a venv (`python -m venv --without-pip`) whose only path entry is the
  driver venv's site-packages directory, written into a `.pth` file: the executors get pandas,
  pyarrow and PySpark from there but not `groupops`, which the driver venv has only through its
  editable install's own `.pth` file, and Python runs `.pth` files of site directories only,
  never of a directory a `.pth` line adds. So a job whose executors import `groupops` works
  only if the package was shipped.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from groupops.devstack import paths
from groupops.devstack.errors import NotBuiltError, StartError
from groupops.devstack.process import ManagedProcess, free_port, port_taken, signal_group

__all__ = ["SparkCluster", "SparkClusterSettings", "executor_python", "package_zip", "spark_home"]

log = logging.getLogger(__name__)

_START_ATTEMPTS = 3
_REPOSITORY = Path(__file__).resolve().parents[3]
"""The checkout this module runs from (operator/groupops/devstack/ → the repository)."""

# INFO for the lines that say who registered; everything else at WARN.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.master.name = org.apache.spark.deploy.master.Master
logger.master.level = info
logger.worker.name = org.apache.spark.deploy.worker.Worker
logger.worker.level = info
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkClusterSettings:
    """The cluster's shape.

    workers: worker daemons; each offers `worker_cores` cores and `worker_memory` to executors
        (1 core and 1g each: two executors of Spark's default 1g on a 2-core machine).
    daemon_memory: heap of the master and worker daemons themselves (they only schedule).
    ready_timeout_s: master up and every worker registered, on a loaded machine.
    """

    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    daemon_memory: str = "256m"
    ready_timeout_s: float = 120.0


def spark_home() -> Path:
    """PySpark's installation directory, which is a Spark home (bin/spark-class, jars/)."""
    try:
        import pyspark  # noqa: PLC0415  (only the cluster needs PySpark)
    except ImportError as e:
        raise NotBuiltError("PySpark is not installed: `pip install -e '.[pipeline]'`") from e
    home = Path(pyspark.__file__).resolve().parent
    if not os.access(home / "bin" / "spark-class", os.X_OK):
        raise NotBuiltError(f"no bin/spark-class in PySpark's installation at {home}")
    return home


@dataclass(slots=True)
class _Daemon:
    name: str
    port: int
    ui_port: int
    directory: Path
    process: ManagedProcess | None = field(default=None)


class SparkCluster:
    """A standalone master and its workers on 127.0.0.1 (see the module docstring)."""

    def __init__(self, workdir: Path, settings: SparkClusterSettings | None = None) -> None:
        self.workdir = workdir
        self.settings = settings or SparkClusterSettings()
        self.master: _Daemon | None = None
        self.workers: list[_Daemon] = []
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        """The master URL a session connects to: spark://127.0.0.1:<port>."""
        if self.master is None:
            raise RuntimeError("the Spark cluster was never started")
        return f"spark://127.0.0.1:{self.master.port}"

    @property
    def ui_url(self) -> str:
        if self.master is None:
            raise RuntimeError("the Spark cluster was never started")
        return f"http://127.0.0.1:{self.master.ui_port}"

    @property
    def log_paths(self) -> list[Path]:
        return [self.workdir / name / "daemon.log" for name in self._names()]

    def _names(self) -> list[str]:
        return ["master", *(f"worker-{n}" for n in range(1, self.settings.workers + 1))]

    def _daemons(self) -> list[_Daemon]:
        return [d for d in [self.master, *self.workers] if d is not None]

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the master and the workers and wait until every worker is registered; on
        failure stop what started and raise StartError with the failing daemon's log."""
        home = spark_home()
        paths.java_binary()  # NotBuiltError early, with a clear message, when Java is missing
        began = time.monotonic()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once(home)
                break
            except StartError as e:
                if attempt == _START_ATTEMPTS or not port_taken(e):
                    raise
                log.warning("spark: attempt %d lost a port race (%s); retrying with new ports", attempt, e)
        self.start_seconds = time.monotonic() - began
        log.info(
            "spark: master %s with %d workers in %.1f s", self.url, len(self.workers), self.start_seconds
        )

    def _environment(self, directory: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "SPARK_HOME"}}
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(directory / "local"),
            SPARK_DAEMON_MEMORY=self.settings.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=f"-Dlog4j2.configurationFile=file:{self.workdir / 'log4j2.properties'}",
            SPARK_CONF_DIR=str(self.workdir / "conf"),  # an empty one: no site defaults leak in
        )
        return env

    def _plan(self, name: str) -> _Daemon:
        directory = self.workdir / name
        (directory / "local").mkdir(parents=True, exist_ok=True)
        return _Daemon(name=name, port=free_port(), ui_port=free_port(), directory=directory)

    def _start_once(self, home: Path) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "conf").mkdir(exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        spark_class = str(home / "bin" / "spark-class")
        self.master = self._plan("master")
        self.workers = [self._plan(name) for name in self._names()[1:]]
        try:
            master = self.master
            master.process = ManagedProcess(
                "spark master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(master.port),
                    "--webui-port",
                    str(master.ui_port),
                ],
                log_path=master.directory / "daemon.log",
                env=self._environment(master.directory),
                cwd=master.directory,
                own_session=False,  # at the caller's priority (devstack/process.py)
            )
            master.process.start()
            deadline = time.monotonic() + self.settings.ready_timeout_s
            master.process.wait_ready(
                lambda: self.status() is not None, timeout_s=self.settings.ready_timeout_s, what="/json/"
            )
            for worker in self.workers:
                worker.process = ManagedProcess(
                    f"spark {worker.name}",
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(worker.port),
                        "--webui-port",
                        str(worker.ui_port),
                        "--cores",
                        str(self.settings.worker_cores),
                        "--memory",
                        self.settings.worker_memory,
                        "--work-dir",
                        str(worker.directory / "work"),
                        self.url,
                    ],
                    log_path=worker.directory / "daemon.log",
                    env=self._environment(worker.directory),
                    cwd=worker.directory,
                    own_session=False,
                )
                worker.process.start()
            for worker in self.workers:
                assert worker.process is not None
                worker.process.wait_ready(
                    functools.partial(self._registered, worker),
                    timeout_s=max(1.0, deadline - time.monotonic()),
                    what=f"registered with the master at {self.url}",
                )
        except BaseException:
            self.stop()
            raise

    def status(self) -> dict[str, Any] | None:
        """The master's state document (`/json/`: workers, cores, applications), None when the
        master does not answer."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as response:
                document: dict[str, Any] = json.load(response)
                return document
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _registered(self, worker: _Daemon) -> bool:
        document = self.status() or {}
        return any(
            w.get("port") == worker.port and w.get("state") == "ALIVE" for w in document.get("workers", [])
        )

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop every daemon and whatever it started (idempotent): SIGTERM to each process group,
        workers first (they stop their executors), SIGKILL to the groups after `timeout_s`."""
        daemons = [d for d in [*self.workers, self.master] if d is not None and d.process is not None]
        groups = []
        for daemon in daemons:
            assert daemon.process is not None
            with contextlib.suppress(RuntimeError):
                groups.append(daemon.process.pid)  # a group of its own: the pid is the group id
            signal_group(daemon.process.pid, signal.SIGTERM)
        for daemon in daemons:
            assert daemon.process is not None
            daemon.process.stop(timeout_s)
        for group in groups:
            signal_group(group, signal.SIGKILL)  # executors or Python workers left behind

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# -- shipping --------------------------------------------------------------------------------


def _sources_digest() -> str:
    """A digest of what goes into the wheel: pyproject.toml and the package's files."""
    digest = hashlib.sha256((_REPOSITORY / "pyproject.toml").read_bytes())
    package = _REPOSITORY / "operator" / "groupops"
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if path.is_file() and "__pycache__" not in relative.parts and relative.parts[0] != "devstack":
            digest.update(str(relative).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def package_zip() -> Path:
    """The project's wheel under a `.zip` name, for `--py-files` / `SparkContext.addPyFile`:
    built with `pip wheel --no-deps` from a copy of the sources, cached by their digest."""
    target = paths.cache_dir() / "spark" / f"groupops-py-files-{_sources_digest()}.zip"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="groupops-wheel-") as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(_REPOSITORY / name, source / name)
        shutil.copytree(
            _REPOSITORY / "operator",
            source / "operator",
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "devstack"),
        )
        built = Path(scratch) / "wheel"
        command = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(built),
            str(source),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        wheels = sorted(built.glob("groupops-*.whl"))
        if result.returncode != 0 or not wheels:
            raise NotBuiltError(f"`pip wheel` of the project failed:\n{result.stdout}{result.stderr}")
        partial = target.with_suffix(".partial")
        shutil.copyfile(wheels[0], partial)
        partial.replace(target)
    for stale in target.parent.glob("groupops-py-files-*.zip"):
        if stale != target:
            stale.unlink(missing_ok=True)
    log.info("spark: built %s", target)
    return target


def executor_python() -> Path:
    """A Python for executors that has the driver venv's libraries but not `groupops` (see the
    module docstring), created once under `$GROUPOPS_CACHE/spark/`."""
    site = Path(sysconfig.get_paths()["purelib"])
    key = hashlib.sha256(f"{sys.executable}\0{site}".encode()).hexdigest()[:12]
    venv = paths.cache_dir() / "spark" / f"executor-venv-{key}"
    python = venv / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    marker = venv / "lib" / version / "site-packages" / "driver-libraries.pth"
    if marker.is_file() and os.access(python, os.X_OK):
        return python
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{site}\n")
    probe = subprocess.run(
        [str(python), "-c", "import pandas, pyarrow, pyspark; import groupops"],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=120,
    )
    if "No module named 'groupops'" not in probe.stderr:
        shutil.rmtree(venv, ignore_errors=True)
        raise NotBuiltError(
            f"the executor Python at {python} must have pandas, pyarrow and PySpark and no groupops; "
            f"probe said: {probe.stderr.strip()[-500:] or 'groupops imported'}"
        )
    return python
