"""`groupops pipeline <job>` end to end on a Parquet snapshot dataset (JSON for machines, exit 2
with one line for bad input), and the `forecast` lag source reading what the forecast job wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from groupops.cli import app
from groupops.lag import LagSourceConfigError, LagSourceUnavailable, UnknownTopicError
from groupops.lag.forecast import ForecastLagSource, from_spec
from groupops.lag.registry import SourceContext, build_lag_source
from groupops.pipeline import jobs, synthetic

pytestmark = pytest.mark.pipeline

SPEC = synthetic.HistorySpec(groups=3, partitions=8, steps=120, stall=((1, 2),), stop=((2, 5),), rewind=())


@pytest.fixture(scope="module")
def dataset(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pipeline")
    result = jobs.run_job("generate", spark, jobs.JobOptions(input=None, out=out, history=SPEC))
    assert result.rows["snapshots"] == SPEC.rows
    return Path(result.outputs["snapshots"])


@pytest.fixture(scope="module")
def forecast_dir(spark: SparkSession, dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("forecast-out")
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            "forecast",
            "--input",
            str(dataset),
            "--out",
            str(out),
            "--window",
            "5m",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["job"] == "forecast"
    assert document["rows"]["forecast"] == SPEC.groups * SPEC.partitions
    assert document["figures"]["status"]["STALL"] == 1
    assert document["figures"]["status"]["STOP"] == 1
    assert {(r["group"], r["partition"], r["status"]) for r in document["figures"]["flagged"]} == {
        ("g0001", 2, "STALL"),
        ("g0002", 5, "STOP"),
    }
    return Path(document["outputs"]["forecast"])


def test_forecast_source_reads_the_forecast_jobs_output(spark: SparkSession, forecast_dir: Path) -> None:
    expected = {
        r["partition"]: r["forecast_lag"]
        for r in spark.read.parquet(str(forecast_dir)).where("group = 'g0001'").collect()
    }
    snapshot = ForecastLagSource(forecast_dir, max_age_s=None).read("g0001", ["t0001"])
    assert snapshot.lags == {"t0001": [expected[p] for p in range(SPEC.partitions)]}
    assert snapshot.taken_at == SPEC.start + SPEC.last_t


def test_forecast_source_errors_say_what_to_do(forecast_dir: Path, tmp_path: Path) -> None:
    source = build_lag_source(
        "forecast", {"path": str(forecast_dir)}, SourceContext(bootstrap_servers="unused:9092")
    )
    assert isinstance(source, ForecastLagSource)
    with pytest.raises(LagSourceUnavailable, match="old"):
        source.read("g0001", ["t0001"])  # the synthetic history is from January 2026
    fresh = ForecastLagSource(forecast_dir, max_age_s=None)
    with pytest.raises(UnknownTopicError, match="t9999"):
        fresh.read("g0001", ["t9999"])
    with pytest.raises(UnknownTopicError, match="no forecast for group"):
        fresh.read("nobody", [])
    with pytest.raises(LagSourceUnavailable, match="groupops pipeline forecast"):
        ForecastLagSource(tmp_path / "missing").read("g0001", [])
    with pytest.raises(LagSourceConfigError, match=r"lagSource\.forecast\.path"):
        from_spec({})
    with pytest.raises(LagSourceConfigError, match=r"lagSource\.forecast\.maxAge"):
        from_spec({"path": "x", "maxAge": 5})


def test_plan_job_on_forecast_lag_plans_every_group(
    spark: SparkSession, dataset: Path, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            "plan",
            "--input",
            str(dataset),
            "--out",
            str(tmp_path),
            "--lag",
            "forecast",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["figures"]["groups"] == SPEC.groups
    assert document["figures"]["groups_with_error"] == 0
    rows = spark.read.parquet(document["outputs"]["plan"]).collect()
    assert sum(len(r["partitions"]) for r in rows) == SPEC.groups * SPEC.partitions


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param(["pipeline", "nope", "--input", "."], "unknown job 'nope'", id="unknown-job"),
        pytest.param(["pipeline", "rates", "--input", "/no/such/dir"], "(--input)", id="missing-input"),
        pytest.param(
            ["pipeline", "rates", "--input", ".", "--window", "soon"], "(--window)", id="bad-window"
        ),
        pytest.param(
            ["pipeline", "plan", "--input", ".", "--strategy", "fastest"], "(--strategy)", id="bad-strategy"
        ),
        pytest.param(["pipeline", "rates"], "(--input)", id="no-input"),
        pytest.param(["pipeline", "rates", "--input", "kafka://"], "(--input)", id="kafka-without-topic"),
    ],
)
def test_bad_input_exits_2_with_one_line(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
