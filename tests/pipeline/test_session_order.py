"""A classic session built after a Spark Connect client in the same process is classic
(`build_session`; PySpark marks a process that built a Connect client with
SPARK_CONNECT_MODE_ENABLED, and a classic builder then asked for a remote URL, which broke the
standalone tests whenever they ran after the Connect ones). Run in a child process of its own, so
that the shared test session is not touched: Connect client first, then `local[1]`."""

from __future__ import annotations

from groupops.devstack.spark_connect import SparkConnectServer
from tests.pipeline.child import run_python

_ORDER = """
import sys
from groupops.pipeline.session import SessionSettings, build_session

remote = build_session(SessionSettings(remote=sys.argv[1], progress=False))
assert remote.range(3).count() == 3
assert type(remote).__module__.startswith("pyspark.sql.connect"), type(remote)
remote.stop()
classic = build_session(SessionSettings(master="local[1]", app_name="order", progress=False))
assert classic.range(4).count() == 4
print("classic:", type(classic).__module__, classic.sparkContext.master)
classic.stop()
"""


def test_a_classic_session_after_a_connect_client_in_one_process_is_classic(
    spark_connect: SparkConnectServer,
) -> None:
    done = run_python(_ORDER, spark_connect.url)
    assert "classic: pyspark.sql.session local[1]" in done.stdout, done.stdout
