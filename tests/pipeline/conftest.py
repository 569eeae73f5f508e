"""The pipeline tests' SparkSession (real PySpark), shared by the whole session, on one of two
masters:

    local        `local[2]` in this process (every pipeline test);
    standalone   a real Spark standalone cluster, one master and two workers of one core each
                 (groupops.devstack.spark_cluster), started once; its executors run a Python
                 without groupops and get the package as users ship it, the project's wheel as a
                 py-file (docs/pipeline.md, "Run on a cluster").

The known-answer modules (`BOTH_MASTERS`) run on both, as does any module that names them,
`SPARK_MASTERS = ("local", "standalone")`: each of its tests that uses `spark` runs once per master
(ids `[local]`, `[standalone]`). Every other module runs on `local` only.
`spark` is a session-scoped fixture parametrized by master, so pytest runs all tests of one master
together: a process holds one SparkContext at a time, and the switch (one stop, one start) happens
once. A session takes 10-30 s to start on two cores, the cluster about 15 s.

The local session has Spark's Kafka source on its classpath (resolved from Maven Central into the
project cache on first use) so the end-to-end test can read the snapshot topic.

Without Java or PySpark's spark-class the standalone tests skip on a developer's machine and fail
in CI (`CI` set): the cluster tests must run there every time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from groupops.devstack.errors import NotBuiltError
from groupops.devstack.spark_cluster import SparkCluster, executor_python, package_zip
from groupops.pipeline.jobs import Shipping, ship_to_executors
from groupops.pipeline.session import SessionSettings, build_session

MASTERS = ("local", "standalone")
BOTH_MASTERS = frozenset(
    {
        "test_history_known_answers",  # rates, time lag, forecast and Burrow's statuses, 1M rows
        "test_plan_matches_assign",  # plan: pandas UDFs, so groupops itself, on the executors
        "test_time_lag_matches_the_operator",
    }
)
"""Modules whose answers must not depend on where Spark runs them (issue 14)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spark" in metafunc.fixturenames:
        name = metafunc.module.__name__.rsplit(".", 1)[-1]
        default = MASTERS if name in BOTH_MASTERS else ("local",)
        masters = getattr(metafunc.module, "SPARK_MASTERS", default)
        unknown = set(masters) - set(MASTERS)
        if unknown:
            raise ValueError(f"SPARK_MASTERS of {metafunc.module.__name__}: unknown {sorted(unknown)}")
        metafunc.parametrize("spark", masters, indirect=True, scope="session")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """The standalone cluster (started on first use, stopped at the end of the session)."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
    except NotBuiltError as e:
        if os.environ.get("CI"):
            pytest.fail(f"the Spark standalone cluster cannot start in CI: {e}")
        pytest.skip(f"no Spark standalone cluster here: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def shipping() -> Shipping:
    """What the cluster's executors get: the wheel as a py-file and a Python without groupops."""
    return Shipping(py_files=(str(package_zip()),), executor_python=str(executor_python()))


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    master: str = request.param
    if master == "standalone":
        cluster: SparkCluster = request.getfixturevalue("spark_cluster")
        session = build_session(
            SessionSettings(
                master=cluster.url, app_name="groupops-tests", progress=False, shuffle_partitions=4
            )
        )
        ship_to_executors(session, request.getfixturevalue("shipping"))
    else:
        session = build_session(
            SessionSettings(
                master="local[2]", app_name="groupops-tests", kafka=True, progress=False, shuffle_partitions=4
            )
        )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def spark_master(spark: SparkSession) -> str:
    """The master the current test runs on: `local[2]` or `spark://127.0.0.1:<port>`."""
    return str(spark.sparkContext.master)
