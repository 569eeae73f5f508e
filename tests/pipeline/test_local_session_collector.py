"""A local master's JVM runs the throughput collector (`session.LOCAL_GC`, docs/design.md §10); a
cluster's driver keeps the JVM's default. Each session is built in a child process of its own: the
collector is chosen when the JVM starts, and the shared test session's JVM started long before."""

from __future__ import annotations

from groupops.devstack.spark_cluster import SparkCluster
from tests.pipeline.child import run_python

_COLLECTORS = """
import sys
from groupops.pipeline.session import SessionSettings, build_session

session = build_session(SessionSettings(master=sys.argv[1], app_name="collector", progress=False))
assert session.range(5).count() == 5
beans = session.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print("collectors:", sorted(bean.getName() for bean in beans))
session.stop()
"""


def _collectors(master: str) -> str:
    done = run_python(_COLLECTORS, master)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("collectors:")]
    return line


def test_a_local_session_runs_the_parallel_collector() -> None:
    assert _collectors("local[1]") == "collectors: ['PS MarkSweep', 'PS Scavenge']"


def test_a_cluster_driver_keeps_the_jvms_default_collector(spark_cluster: SparkCluster) -> None:
    line = _collectors(spark_cluster.url)
    assert "PS Scavenge" not in line, line
    assert "G1" in line, line
