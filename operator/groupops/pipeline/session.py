"""The SparkSession every job runs in: local[*] by default, any master by flag, or a Spark Connect
client (`SessionSettings.remote`, `sc://host:port`).

Who calls it: the job entry points (`groupops pipeline <job>`, groupops.pipeline.jobs) and the
pipeline tests' one shared session. Transforms never build a session.

What it sets, and why:
- the executors' Python and what they are shipped (`ExecutorSettings`): `PYSPARK_PYTHON`, which
  PySpark reads when the context starts (default: this interpreter, so local Python workers import
  the same groupops and pandas; under spark-submit, spark-submit's own `spark.pyspark.python`),
  archives as `spark.archives`, both before the context starts, and py-files added
  (`SparkContext.addPyFile`) before the session is returned, so every Python UDF carries them.
  Not `spark.submit.pyFiles`: only spark-submit distributes those, and PySpark runs spark-submit
  once per process, for its first context;
- `SPARK_LOCAL_IP=127.0.0.1` for local masters (servers bind loopback only; a cluster master
  needs the driver reachable, so it is left alone there);
- quiet logs: a log4j2 configuration at ERROR, written to the cache;
- the SQL warehouse directory in the cache, not the working directory (outside spark-submit);
- Spark's Kafka source (`org.apache.spark:spark-sql-kafka-0-10_2.13`) through
  `spark.jars.packages`, resolved by Ivy from Maven Central into `$GROUPOPS_CACHE/ivy`, only when a
  job reads or writes Kafka (`SessionSettings.kafka`).

A Connect session (`remote`) is a client: the server owns the master, the memory, the classpath
(Spark's Kafka source must be on the server's) and its executors' Python (its own PYSPARK_PYTHON);
the client sets UTC, Arrow and the shuffle partitions for its session and ships py-files and
archives as artifacts (`SparkSession.addArtifacts`), which the server's Python UDFs import.

The connector's version is PySpark's own, except where Maven Central lacks that release:
`CONNECTOR_PINS` says what to use instead. Spark 4.3.0 is such a case: no Spark 4.3 artifact is
published there; connectors 4.0.x and 4.1.x fail on 4.3 (NoClassDefFoundError on the moved
`LogKeys`), 4.2.0 works, but its dependency `spark-token-provider-kafka-0-10_2.13:4.2.0` is not
published either, and the newest published token provider (4.0.0) works with it. The Ivy settings
then carry a namespace rule that resolves the token provider at that version; everything else
Ivy resolves as usual. `GROUPOPS_SPARK_KAFKA_VERSION` overrides the connector version.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

__all__ = [
    "CONNECTOR_PINS",
    "LOCAL_GC",
    "ExecutorSettings",
    "KafkaConnector",
    "SessionSettings",
    "SessionSettingsError",
    "build_session",
    "cache_dir",
    "kafka_connector",
    "spark_version",
]

log = logging.getLogger(__name__)

SCALA_BINARY = "2.13"
CONNECTOR_ARTIFACT = f"spark-sql-kafka-0-10_{SCALA_BINARY}"
TOKEN_PROVIDER_ARTIFACT = f"spark-token-provider-kafka-0-10_{SCALA_BINARY}"
SPARK_GROUP = "org.apache.spark"
# PySpark's wheel already ships these (same versions); resolving them again only adds 40 MB.
PACKAGE_EXCLUDES = ("org.apache.hadoop:hadoop-client-runtime", "org.apache.hadoop:hadoop-client-api")

# A local master's driver is its executor too: a batch job with a heap of a few GiB, where pauses
# cost nothing and throughput is all, which the throughput collector gives (docs/design.md §10).
LOCAL_GC = "-XX:+UseParallelGC"

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark's gateway counts as a shell: Spark resets the root level to this logger's (WARN when
# unset) and says so on stderr; the same level keeps it quiet.
logger.shell.name = org.apache.spark.api.python.PythonGatewayServer
logger.shell.level = error
"""


@dataclass(frozen=True, slots=True)
class KafkaConnector:
    """Versions of Spark's Kafka source to resolve. `token_provider`, when set, is the version of
    the connector's token-provider dependency to use instead of the connector's own."""

    version: str
    token_provider: str | None = None

    @property
    def coordinate(self) -> str:
        return f"{SPARK_GROUP}:{CONNECTOR_ARTIFACT}:{self.version}"


CONNECTOR_PINS: dict[str, KafkaConnector] = {
    "4.3.0": KafkaConnector("4.2.0", token_provider="4.0.0"),
}
"""PySpark version → connector to use, where Maven Central has no connector of that version."""


def spark_version() -> str:
    version: str = pyspark.__version__
    return version


def kafka_connector(version: str | None = None) -> KafkaConnector:
    """The connector for a PySpark version (default: the installed one)."""
    override = os.environ.get("GROUPOPS_SPARK_KAFKA_VERSION")
    if override:
        return KafkaConnector(override)
    version = version or spark_version()
    return CONNECTOR_PINS.get(version, KafkaConnector(version))


def cache_dir() -> Path:
    """$GROUPOPS_CACHE, or ~/.cache/groupops (the project cache)."""
    configured = os.environ.get("GROUPOPS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "groupops"


class SessionSettingsError(ValueError):
    """A session setting that cannot work: `setting` names it (`executors.py_files`, ...)."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(f"{message} ({setting})")
        self.message = message
        self.setting = setting


# PySpark puts py-files with these suffixes on the executors' path (SparkContext.PACKAGE_EXTENSIONS),
# and a `.py` file lands in the working directory, which is on the path too.
PY_FILE_SUFFIXES = (".zip", ".egg", ".jar", ".py")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorSettings:
    """What a cluster's executors run and get (docs/pipeline.md, "Run on a cluster"). `plan` and
    `backtest` import groupops on the executors; the Spark SQL jobs need none of this.

    python: the Python the executors start (PySpark's `PYSPARK_PYTHON`): `./env/bin/python` for
        a shipped venv archive, or a Python every worker has. None: the driver's own interpreter
        path (right for local masters, and for workers with the same venv at the same path), or
        under spark-submit the Python spark-submit chose (`spark.pyspark.python`).
    py_files: zip archives put on the executors' Python path (`SparkContext.addPyFile`): the groupops
        wheel under a `.zip` name, since PySpark adds only .zip, .egg and .jar py-files to it.
    archives: archives unpacked in each executor's working directory (`spark.archives`),
        `venv.tar.gz#env` to unpack under `env/`.
    """

    python: str | None = None
    py_files: tuple[str, ...] = ()
    archives: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.python is not None and not self.python.strip():
            raise SessionSettingsError("an empty path for the executors' Python", "executors.python")
        for path in self.py_files:
            if not path.lower().endswith(PY_FILE_SUFFIXES):
                raise SessionSettingsError(
                    f"{path}: PySpark puts only {', '.join(PY_FILE_SUFFIXES)} py-files on the "
                    "executors' path; ship a wheel under a .zip name",
                    "executors.py_files",
                )
        for archive in self.archives:
            if not archive.split("#", 1)[0]:
                raise SessionSettingsError(f"{archive!r}: no archive before '#'", "executors.archives")

    def resolved_python(self) -> str:
        """The interpreter path the executors get (see `python`)."""
        if self.python is not None:
            return self.python
        if "PYSPARK_GATEWAY_PORT" in os.environ and os.environ.get("PYSPARK_PYTHON"):
            return os.environ["PYSPARK_PYTHON"]  # spark-submit's spark.pyspark.python
        return sys.executable

    def spark_config(self) -> dict[str, str]:
        """The Spark properties the context starts with: `spark.archives` (none when empty)."""
        config = {}
        if self.archives:
            config["spark.archives"] = ",".join(self.archives)
        return config


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSettings:
    """How to build the session.

    master: any Spark master URL; `local[*]` uses every local core; None keeps the master that
        spark-submit configured.
    kafka: put Spark's Kafka source on the classpath (resolved from Maven Central, cached).
    driver_memory: the driver JVM's heap (local mode runs everything in it); 2g holds the 10M-row
        benchmark on a 24 GB machine without spilling much.
    shuffle_partitions: None: 4 per local core for local masters (Spark's 200 makes tiny tasks),
        Spark's own default elsewhere.
    progress: Spark's console progress bar (for people; tests turn it off).
    executors: the executors' Python and what they are shipped (`ExecutorSettings`).
    remote: a Spark Connect server, `sc://host:port`: the session is its client and `master`,
        `kafka`, `driver_memory` and `executors.python` are the server's business (see the module
        docstring); None: a session of its own in this process.
    """

    master: str | None = "local[*]"
    app_name: str = "groupops-pipeline"
    kafka: bool = False
    driver_memory: str = "2g"
    shuffle_partitions: int | None = None
    progress: bool = True
    executors: ExecutorSettings = field(default_factory=ExecutorSettings)
    remote: str | None = None

    def __post_init__(self) -> None:
        if self.remote is None:
            return
        if not self.remote.startswith("sc://") or len(self.remote) == len("sc://"):
            raise SessionSettingsError(
                f"not a Spark Connect URL: {self.remote!r}; write sc://host:port", "remote"
            )
        if self.executors.python is not None:
            raise SessionSettingsError(
                "a Spark Connect server runs its Python UDFs on its own Python (PYSPARK_PYTHON where "
                "the server starts); a client cannot choose it",
                "executors.python",
            )


def _is_local(master: str | None) -> bool:
    return master is not None and (master == "local" or master.startswith("local["))


def _local_cores(master: str) -> int:
    inside = master[len("local[") : -1] if master.startswith("local[") else "1"
    if inside in {"*", ""}:
        return os.cpu_count() or 1
    try:
        return max(1, int(inside.split(",")[0]))
    except ValueError:
        return os.cpu_count() or 1


def ivy_settings(connector: KafkaConnector) -> str:
    """Ivy settings: Maven Central only (m2 layout), plus the token-provider namespace rule when
    the connector is pinned. Ivy's default ibiblio root is Maven Central."""
    rule = ""
    if connector.token_provider is not None:
        org, module = quoteattr(SPARK_GROUP), quoteattr(TOKEN_PROVIDER_ARTIFACT)
        asked, used = quoteattr(connector.version), quoteattr(connector.token_provider)
        rule = f"""
  <namespaces>
    <namespace name="pinned">
      <rule>
        <fromsystem><src org={org} module={module} rev={asked}/><dest rev={used}/></fromsystem>
        <tosystem><src org={org} module={module} rev={used}/><dest rev={asked}/></tosystem>
      </rule>
    </namespace>
  </namespaces>"""
    namespace = ' namespace="pinned"' if rule else ""
    return f"""<ivysettings>
  <settings defaultResolver="central"/>{rule}
  <resolvers>
    <ibiblio name="central" m2compatible="true"{namespace}/>
  </resolvers>
</ivysettings>
"""


def _write_if_changed(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def build_session(settings: SessionSettings | None = None) -> SparkSession:
    """Build (or return the running) session. Sets the environment PySpark reads at launch."""
    settings = settings or SessionSettings()
    if settings.remote is not None:
        return _connect(settings, settings.remote)
    # A Connect client built earlier in this process left PySpark in Connect mode (it marks the
    # process through this variable), and a classic builder would then ask for a remote URL.
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    executor_python = settings.executors.resolved_python()
    _refuse_a_running_context_with_another_python(executor_python)
    os.environ["PYSPARK_PYTHON"] = executor_python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if _is_local(settings.master):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    cache = cache_dir()
    log4j = _write_if_changed(cache / "spark" / "log4j2.properties", _LOG4J2)
    builder = SparkSession.builder
    if settings.master is not None:
        builder = builder.master(settings.master)
    driver_options = [f"-Dlog4j2.configurationFile=file:{log4j}"]
    if _is_local(settings.master):
        driver_options.append(LOCAL_GC)
    builder = (
        builder.appName(settings.app_name)
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.extraJavaOptions", " ".join(driver_options))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", str(settings.progress).lower())
    )
    if settings.master is not None and _is_local(settings.master):
        partitions = settings.shuffle_partitions or 4 * _local_cores(settings.master)
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    else:
        partitions = settings.shuffle_partitions or 0
    if partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # A compacted dataset is read through a table of the session's catalog (pipeline/layout.py),
        # and Spark then makes its warehouse directory, by default in the working directory; under
        # spark-submit the user's configuration says where it goes.
        builder = builder.config("spark.sql.warehouse.dir", str(cache / "spark" / "warehouse"))
    for key, value in settings.executors.spark_config().items():
        builder = builder.config(key, value)
    if settings.kafka:
        connector = kafka_connector()
        ivy = cache / "ivy"
        settings_file = _write_if_changed(
            ivy / f"ivysettings-{connector.version}.xml", ivy_settings(connector)
        )
        builder = (
            builder.config("spark.jars.packages", connector.coordinate)
            .config("spark.jars.excludes", ",".join(PACKAGE_EXCLUDES))
            .config("spark.jars.ivy", str(ivy))
            .config("spark.jars.ivySettings", str(settings_file))
        )
        log.info("spark: Kafka source %s (ivy cache %s)", connector.coordinate, ivy)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    for path in settings.executors.py_files:
        session.sparkContext.addPyFile(path)
    return session


def _refuse_a_running_context_with_another_python(executor_python: str) -> None:
    """getOrCreate returns a running session as it is: its executors keep the Python it started
    with, so different executor settings would be ignored without a word."""
    running = SparkContext._active_spark_context
    if running is not None and running.pythonExec != executor_python:
        raise SessionSettingsError(
            f"a session is already running with executors on {running.pythonExec}, not "
            f"{executor_python}; stop it first",
            "executors.python",
        )


def _connect(settings: SessionSettings, url: str) -> SparkSession:
    """A Spark Connect client session on `url` with this module's session settings."""
    session = SparkSession.builder.remote(url).getOrCreate()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    session.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    if settings.shuffle_partitions:
        session.conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    if settings.executors.py_files:
        session.addArtifacts(*settings.executors.py_files, pyfile=True)
    if settings.executors.archives:
        session.addArtifacts(*settings.executors.archives, archive=True)
    log.info("spark: Connect session on %s", url)
    return session
