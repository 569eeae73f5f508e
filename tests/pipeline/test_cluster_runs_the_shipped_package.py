"""On the standalone cluster the executors are other processes with a Python of their own that has
no groupops: they import it from the wheel shipped as a py-file, as docs/pipeline.md tells users
to, and the `plan` job (whose pandas UDFs run groupops' engine on the executors) works through the
CLI's own shipping options."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from groupops.cli import app
from groupops.devstack.spark_cluster import SparkCluster
from groupops.pipeline import jobs, synthetic
from groupops.pipeline.session import ExecutorSettings

pytestmark = pytest.mark.pipeline

SPARK_MASTERS = ("standalone",)


def test_the_executor_python_has_no_groupops_of_its_own(shipping: ExecutorSettings) -> None:
    assert shipping.python is not None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [shipping.python, "-c", "import pandas, pyarrow, pyspark; import groupops"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert "No module named 'groupops'" in result.stderr


def test_two_workers_run_executors_that_import_the_shipped_wheel(
    spark: SparkSession, spark_cluster: SparkCluster, shipping: ExecutorSettings
) -> None:
    status = spark_cluster.status()
    assert status is not None
    assert [w["state"] for w in status["workers"]] == ["ALIVE", "ALIVE"]
    assert spark.sparkContext.master == spark_cluster.url

    def where_groupops_comes_from(_: object) -> tuple[str, str, str]:
        """Runs on an executor: its Python, its working directory and the file groupops was
        imported from. Nested, so cloudpickle ships it by value: the executors cannot import
        this test module."""
        import sys  # noqa: PLC0415

        import groupops  # noqa: PLC0415

        return sys.executable, os.getcwd(), str(Path(groupops.__file__))

    seen = set(spark.sparkContext.parallelize(range(8), 8).map(where_groupops_comes_from).collect())

    (shipped,) = shipping.py_files
    workers = [spark_cluster.workdir / "worker-1" / "work", spark_cluster.workdir / "worker-2" / "work"]
    executor_dirs = {Path(cwd) for _, cwd, _ in seen}
    assert {python for python, _, _ in seen} == {shipping.python}
    assert {next(w for w in workers if w in d.parents) for d in executor_dirs} == set(workers), seen
    assert {file for _, _, file in seen} == {f"{Path(shipped).name}/groupops/__init__.py"}, seen


def test_plan_job_through_the_cli_on_the_cluster(
    spark: SparkSession, spark_cluster: SparkCluster, shipping: ExecutorSettings, tmp_path: Path
) -> None:
    spec = synthetic.HistorySpec(groups=3, partitions=4, steps=3, stall=(), stop=(), rewind=())
    snapshots = jobs.run_job("generate", spark, jobs.JobOptions(input=None, out=tmp_path, history=spec))
    (py_file,) = shipping.py_files
    assert shipping.python is not None
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            "plan",
            "--master",
            spark_cluster.url,
            "--py-files",
            py_file,
            "--executor-python",
            shipping.python,
            "--input",
            snapshots.outputs["snapshots"],
            "--out",
            str(tmp_path),
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["figures"]["groups"] == spec.groups
    assert document["figures"]["groups_with_error"] == 0
    planned = spark.read.parquet(document["outputs"]["plan"]).collect()
    assert sum(len(row["partitions"]) for row in planned) == spec.groups * spec.partitions


@pytest.mark.parametrize(
    ("option", "value"),
    [
        pytest.param("--py-files", "/no/such/groupops.zip", id="py-file"),
        pytest.param("--archives", "/no/such/env.tar.gz#env", id="archive"),
    ],
)
def test_a_missing_file_to_ship_exits_2_naming_the_option(option: str, value: str) -> None:
    result = CliRunner().invoke(app, ["pipeline", "timelag", "--input", ".", option, value])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: no such file: /no/such/")
    assert result.stderr.rstrip().endswith(f"({option})")
