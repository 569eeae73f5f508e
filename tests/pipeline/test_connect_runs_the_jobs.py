"""Through Spark Connect (`--remote sc://…`, groupops.devstack.spark_connect) the session is a
client: the server runs the Python UDFs on its own Python, which has no groupops, and they import
the wheel the client shipped as an artifact; the `plan` and `backtest` jobs (pandas UDFs running
groupops' engine) work through the CLI's `--remote`; options a Connect client cannot honour exit
2 naming them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from groupops.cli import app
from groupops.devstack.spark_connect import SparkConnectServer
from groupops.pipeline import jobs, synthetic
from groupops.pipeline.session import ExecutorSettings

pytestmark = pytest.mark.pipeline

SPARK_MASTERS = ("connect",)
SPEC = synthetic.HistorySpec(groups=3, partitions=4, steps=6, stall=(), stop=(), rewind=())


def test_the_session_is_a_connect_client_without_a_spark_context(spark: SparkSession) -> None:
    assert type(spark).__module__ == "pyspark.sql.connect.session"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    with pytest.raises(Exception, match="not supported in Spark Connect"):
        _ = spark.sparkContext


def test_udfs_run_the_servers_python_and_import_the_shipped_wheel(
    spark: SparkSession, spark_connect: SparkConnectServer, shipping: ExecutorSettings
) -> None:
    def where_groupops_comes_from(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Runs in the server's Python worker: nested, so it travels by value."""
        import sys  # noqa: PLC0415

        import groupops  # noqa: PLC0415

        for batch in batches:
            yield pd.DataFrame(
                {"python": [sys.executable] * len(batch), "file": [groupops.__file__] * len(batch)}
            )

    seen = (
        spark.range(4)
        .mapInPandas(where_groupops_comes_from, "python string, file string")
        .distinct()
        .collect()
    )

    assert spark_connect.settings.python == shipping.python
    (shipped,) = shipping.py_files
    assert {row["python"] for row in seen} == {shipping.python}
    (row,) = {row["file"] for row in seen}
    assert row.endswith(f"{Path(shipped).name}/groupops/__init__.py"), row


def run_through_connect(
    job: str, spark_connect: SparkConnectServer, snapshots: str, out: Path, py_file: str
) -> dict[str, object]:
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            job,
            "--remote",
            spark_connect.url,
            "--py-files",
            py_file,
            "--input",
            snapshots,
            "--out",
            str(out),
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_plan_and_backtest_run_through_the_cli_on_connect(
    spark: SparkSession, spark_connect: SparkConnectServer, shipping: ExecutorSettings, tmp_path: Path
) -> None:
    snapshots = jobs.run_job("generate", spark, jobs.JobOptions(input=None, out=tmp_path, history=SPEC))
    (py_file,) = shipping.py_files
    path = snapshots.outputs["snapshots"]

    planned = run_through_connect("plan", spark_connect, path, tmp_path, py_file)
    figures = planned["figures"]
    assert isinstance(figures, dict)
    assert (figures["groups"], figures["groups_with_error"]) == (SPEC.groups, 0)
    rows = spark.read.parquet(str(tmp_path / "plan")).collect()
    assert sum(len(row["partitions"]) for row in rows) == SPEC.groups * SPEC.partitions

    replayed = run_through_connect("backtest", spark_connect, path, tmp_path, py_file)
    strategies = replayed["figures"]
    assert isinstance(strategies, dict)
    assert sorted(strategies["strategies"]) == sorted(jobs.JobOptions(input=None, out=tmp_path).strategies)
    assert all(score["error"] is None for score in strategies["strategies"].values())
    summary = spark.read.parquet(str(tmp_path / "backtest")).collect()
    assert len(summary) == SPEC.groups * len(strategies["strategies"])


@pytest.mark.parametrize(
    ("arguments", "message", "option"),
    [
        pytest.param(["--remote", "localhost:15002"], "not a Spark Connect URL", "(--remote)", id="not-sc"),
        pytest.param(
            ["--remote", "sc://127.0.0.1:15002", "--master", "local[2]"],
            "give one of --master and --remote",
            "(--master, --remote)",
            id="both",
        ),
        pytest.param(
            ["--remote", "sc://127.0.0.1:15002", "--executor-python", "/usr/bin/python3"],
            "a client cannot choose it",
            "(--executor-python)",
            id="executor-python",
        ),
    ],
)
def test_options_a_connect_client_cannot_honour_exit_2(
    tmp_path: Path, arguments: list[str], message: str, option: str
) -> None:
    result = CliRunner().invoke(
        app, ["pipeline", "timelag", "--input", str(tmp_path), "--output", "json", *arguments]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert result.stderr.rstrip().endswith(option)
