"""The pipeline tests' SparkSession (real PySpark), shared by the whole session, on one of three
masters:

    local        `local[2]` in this process (every pipeline test);
    standalone   a real Spark standalone cluster, one master and two workers of one core each
                 (groupops.devstack.spark_cluster), started once; its executors run a Python
                 without groupops and get the package as users ship it, the project's wheel as a
                 py-file (docs/pipeline.md, "Run on a cluster");
    connect      a Spark Connect client (`SessionSettings.remote`) of one Spark Connect server
                 (groupops.devstack.spark_connect, `local[2]` inside), started once; its Python
                 UDFs run on the same Python without groupops, and the client ships the wheel as
                 an artifact.

The known-answer modules (`KNOWN_ANSWER_MODULES`) run on all three, as does any module that names
them, `SPARK_MASTERS = ("local", "standalone")`: each of its tests that uses `spark` runs once per
master (ids `[local]`, `[standalone]`, `[connect]`). Every other module runs on `local` only.
`spark` is a session-scoped fixture parametrized by master, so pytest runs all tests of one master
together: a process holds one SparkContext at a time, and the switch (one stop, one start) happens
once. A session takes 10-30 s to start on two cores, the cluster about 15 s, the Connect server
about 10 s.

The local session has Spark's Kafka source on its classpath (resolved from Maven Central into the
project cache on first use) so the end-to-end test can read the snapshot topic.

Without Java or PySpark's spark-class (or its Connect jar) the standalone (connect) tests skip on a
developer's machine and fail in CI (`CI` set): the cluster and Connect tests must run there every
time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import pytest
from pyspark.sql import SparkSession

from groupops.devstack.errors import NotBuiltError
from groupops.devstack.spark_cluster import SparkCluster, executor_python, package_zip
from groupops.devstack.spark_connect import SparkConnectServer, SparkConnectSettings
from groupops.pipeline.session import ExecutorSettings, SessionSettings, build_session

MASTERS = ("local", "standalone", "connect")
KNOWN_ANSWER_MODULES = frozenset(
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
        default = MASTERS if name in KNOWN_ANSWER_MODULES else ("local",)
        masters = getattr(metafunc.module, "SPARK_MASTERS", default)
        unknown = set(masters) - set(MASTERS)
        if unknown:
            raise ValueError(f"SPARK_MASTERS of {metafunc.module.__name__}: unknown {sorted(unknown)}")
        metafunc.parametrize("spark", masters, indirect=True, scope="session")


class _Startable(Protocol):
    def start(self) -> None: ...


_Server = TypeVar("_Server", bound=_Startable)


def start_or_skip(make: Callable[[], _Server], what: str) -> _Server:
    """`make()`, started. A component that cannot be built here skips the tests that need it, but
    fails them in CI, which must run them all."""
    try:
        server = make()
        server.start()
    except NotBuiltError as e:
        if os.environ.get("CI"):
            pytest.fail(f"the {what} cannot start in CI: {e}")
        pytest.skip(f"no {what} here: {e}")
    return server


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """The standalone cluster (started on first use, stopped at the end of the session)."""
    cluster = start_or_skip(
        lambda: SparkCluster(tmp_path_factory.mktemp("spark-cluster")), "Spark standalone cluster"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    """The Spark Connect server (started on first use, stopped at the end of the session); its
    UDFs run the executor Python without groupops, as the cluster's do."""
    server = start_or_skip(
        lambda: SparkConnectServer(
            tmp_path_factory.mktemp("spark-connect"), SparkConnectSettings(python=str(executor_python()))
        ),
        "Spark Connect server",
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shipping() -> ExecutorSettings:
    """What the cluster's executors get: the wheel as a py-file and a Python without groupops."""
    return ExecutorSettings(python=str(executor_python()), py_files=(str(package_zip()),))


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    master: str = request.param
    if master == "standalone":
        cluster: SparkCluster = request.getfixturevalue("spark_cluster")
        session = build_session(
            SessionSettings(
                master=cluster.url,
                app_name="groupops-tests",
                progress=False,
                shuffle_partitions=4,
                executors=request.getfixturevalue("shipping"),
            )
        )
    elif master == "connect":
        server: SparkConnectServer = request.getfixturevalue("spark_connect")
        session = build_session(
            SessionSettings(
                remote=server.url,
                progress=False,
                shuffle_partitions=4,
                # The server chooses its Python; the client ships the cluster's wheel, built once.
                executors=ExecutorSettings(py_files=request.getfixturevalue("shipping").py_files),
            )
        )
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
def spark_master(spark: SparkSession, request: pytest.FixtureRequest) -> str:
    """The master the current test runs on: `local[2]`, `spark://127.0.0.1:<port>` or, for a
    Connect session (which has no SparkContext), `sc://127.0.0.1:<port>`."""
    if spark.__class__.__module__.startswith("pyspark.sql.connect"):
        server: SparkConnectServer = request.getfixturevalue("spark_connect")
        return server.url
    return str(spark.sparkContext.master)
