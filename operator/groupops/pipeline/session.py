"""The SparkSession every job runs in: local[*] by default, any master by flag.

Who calls it: the job entry points (`groupops pipeline <job>`, groupops.pipeline.jobs) and the
pipeline tests' one shared session. Transforms never build a session.

What it sets, and why:
- `PYSPARK_PYTHON` = this interpreter, so Python workers import the same groupops and pandas;
- `SPARK_LOCAL_IP=127.0.0.1` for local masters (servers bind loopback only; a cluster master
  needs the driver reachable, so it is left alone there);
- quiet logs: a log4j2 configuration at ERROR, written to the cache;
- Spark's Kafka source (`org.apache.spark:spark-sql-kafka-0-10_2.13`) through
  `spark.jars.packages`, resolved by Ivy from Maven Central into `$GROUPOPS_CACHE/ivy`, only when a
  job reads or writes Kafka (`SessionSettings.kafka`).

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
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pyspark
from pyspark.sql import SparkSession

__all__ = [
    "CONNECTOR_PINS",
    "KafkaConnector",
    "SessionSettings",
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
    """

    master: str | None = "local[*]"
    app_name: str = "groupops-pipeline"
    kafka: bool = False
    driver_memory: str = "2g"
    shuffle_partitions: int | None = None
    progress: bool = True


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
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if _is_local(settings.master):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    cache = cache_dir()
    log4j = _write_if_changed(cache / "spark" / "log4j2.properties", _LOG4J2)
    builder = SparkSession.builder
    if settings.master is not None:
        builder = builder.master(settings.master)
    builder = (
        builder.appName(settings.app_name)
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
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
    return session
