"""An incremental run over a snapshot dataset that grew gives, row for row, what a full run over the
whole dataset gives (rates, timelag and its member and group tables, forecast, plan, the backtest's
steps and summary), while reading only the new dates plus the look-back it needs (Spark prunes the
`date` partitions); bad `--since` values exit 2 with one line naming the option.

The history: 4 days (2026-01-01 to 2026-01-04) of 3 groups x 8 partitions, a snapshot every 20
minutes. The dataset first holds everything before 2026-01-04 06:00, a full run writes its outputs,
then the rest is appended (new files, the 4th date grows), except for one group that went quiet
(`QUIET`: nothing after 05:40), and `--incremental` resumes at the start of the newest date in the
outputs: 2026-01-04; `plan` (`--since` only) resumes at 06:00 itself and plans the two groups with
new snapshots. Falling-behind partitions are at most 29 h behind there, so a 36 h look-back (read
from 2026-01-02 12:00) covers every time lag: 2026-01-01 is never read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import DoubleType
from typer.testing import CliRunner

from groupops.cli import app
from groupops.pipeline import synthetic
from groupops.pipeline.io import parse_input, parse_since, read_snapshots

pytestmark = pytest.mark.pipeline

SPEC = synthetic.HistorySpec(groups=3, partitions=8, steps=288, step_s=1200)
GROWN_AT = "2026-01-04 06:00:00"
MIDNIGHT = "2026-01-04T00:00:00+00:00"
LOOKBACK = "36h"
QUIET = "g0002"
JOB_ARGUMENTS = {
    "rates": ["--window", "1h"],
    "timelag": ["--lookback", LOOKBACK],
    "forecast": ["--window", "2h", "--horizon", "30m"],
    "plan": ["--strategy", "balanced"],
    "backtest": ["--step", "20m", "--strategies", "roundrobin,sticky,lag,balanced"],
}
RESUME_ARGUMENTS = {"plan": ["--since", "2026-01-04T06:00:00Z"]}
"""How each job resumes: `--incremental`, except `plan`, whose output holds no time."""
RESUMED_AT = {"plan": "2026-01-04T06:00:00+00:00"}
OUTPUTS = {
    "rates": ("rates",),
    "timelag": ("timelag", "timelag_members", "timelag_groups"),
    "forecast": ("forecast",),
    "plan": ("plan",),
    "backtest": ("backtest_steps", "backtest"),
}


def run(*arguments: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["pipeline", *arguments, "--output", "json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def append_dated(frame: DataFrame, path: Path) -> None:
    """What `groupops snapshot --to DIR` does: new files under date=…/, never a rewrite."""
    frame.withColumn("date", sf.date_format("ts", "yyyy-MM-dd")).write.mode("append").partitionBy(
        "date"
    ).parquet(str(path))


def comparable(frame: DataFrame) -> DataFrame:
    """Doubles to 9 decimals: sums and means may add the same terms in another order."""
    return frame.select(
        *[
            sf.round(field.name, 9).alias(field.name)
            if isinstance(field.dataType, DoubleType)
            else field.name
            for field in frame.schema.fields
        ]
    )


@pytest.fixture(scope="module")
def grown(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dataset grown after a first run, the outputs of that run brought up to date with
    `--incremental`, and a full run's outputs over the grown dataset."""
    root = tmp_path_factory.mktemp("incremental")
    snapshots, incremental, full = root / "snapshots", root / "incremental", root / "full"
    history = synthetic.history(spark, SPEC)
    cut = sf.col("ts") < sf.lit(GROWN_AT).cast("timestamp")
    append_dated(history.where(cut), snapshots)
    for job, arguments in JOB_ARGUMENTS.items():
        first = run(job, "--input", str(snapshots), "--out", str(incremental), *arguments)
        assert first["figures"]["mode"] == "full"
    shutil.copytree(incremental / "plan", root / "plan-before")
    append_dated(history.where(~cut & (sf.col("group") != QUIET)), snapshots)
    for job, arguments in JOB_ARGUMENTS.items():
        resume = RESUME_ARGUMENTS.get(job, ["--incremental"])
        resumed = run(job, "--input", str(snapshots), "--out", str(incremental), *resume, *arguments)
        figures = resumed["figures"]
        assert figures["mode"] == "incremental"
        assert figures["since"] == RESUMED_AT.get(job, MIDNIGHT)
        if job == "timelag":
            assert figures["read_from"] == "2026-01-02T12:00:00+00:00"
            assert figures["rows_beyond_lookback"] == 0
        run(job, "--input", str(snapshots), "--out", str(full), *arguments)
    return {
        "snapshots": snapshots,
        "incremental": incremental,
        "full": full,
        "plan-before": root / "plan-before",
    }


@pytest.mark.parametrize("output", [name for names in OUTPUTS.values() for name in names])
def test_incremental_output_equals_the_full_runs(
    spark: SparkSession, grown: dict[str, Path], output: str
) -> None:
    resumed = comparable(spark.read.parquet(str(grown["incremental"] / output)))
    full = comparable(spark.read.parquet(str(grown["full"] / output)))
    assert resumed.count() == full.count() > 0
    assert resumed.exceptAll(full).count() == 0
    assert full.exceptAll(resumed).count() == 0


def test_the_grown_dataset_has_four_dates_and_the_outputs_kept_the_first_ones(grown: dict[str, Path]) -> None:
    dates = sorted(p.name for p in grown["snapshots"].iterdir() if p.name.startswith("date="))
    assert dates == [f"date=2026-01-0{day}" for day in range(1, 5)]
    # The earlier dates of the dated outputs are the first run's files, untouched.
    for output in ("rates", "timelag", "backtest_steps"):
        kept = sorted(p.name for p in (grown["incremental"] / output).iterdir() if p.name.startswith("date="))
        assert kept == dates


def test_plan_replans_the_groups_with_new_snapshots_and_keeps_the_quiet_one(
    spark: SparkSession, grown: dict[str, Path]
) -> None:
    before = comparable(spark.read.parquet(str(grown["plan-before"])))
    after = comparable(spark.read.parquet(str(grown["incremental"] / "plan")))
    groups = sorted(r["group"] for r in after.select("group").distinct().collect())
    assert groups == ["g0000", "g0001", QUIET]
    for group in groups:
        was, now = before.where(sf.col("group") == group), after.where(sf.col("group") == group)
        unchanged = was.exceptAll(now).count() == 0 and now.exceptAll(was).count() == 0
        # The quiet group's plan is the first run's; the others were planned on newer lags.
        assert unchanged == (group == QUIET), group


def test_each_backtest_date_is_its_own_replay(spark: SparkSession, grown: dict[str, Path]) -> None:
    steps = spark.read.parquet(str(grown["full"] / "backtest_steps"))
    first_steps = steps.groupBy("date", "group", "strategy").agg(sf.min_by("moves", "step_ts").alias("moves"))
    # Every date starts from the real owners (partition p owned by m<p mod 5>), which `roundrobin`
    # and `sticky` keep: no move at all.
    kept = first_steps.where(sf.col("strategy").isin("roundrobin", "sticky")).collect()
    assert len(kept) == 4 * 3 * 2
    assert {r["moves"] for r in kept} == {0}


def test_an_incremental_read_prunes_dates_and_pushes_the_time_bound(
    spark: SparkSession, grown: dict[str, Path]
) -> None:
    frame = read_snapshots(
        spark, parse_input(str(grown["snapshots"]), bootstrap=None), since=parse_since("2026-01-02T12:00:00Z")
    )
    plan = frame._jdf.queryExecution().executedPlan()
    text = plan.toString()
    assert "PartitionFilters: [isnotnull(date" in text
    assert ">= 2026-01-02)]" in text
    assert "PushedFilters: [IsNotNull(ts), GreaterThanOrEqual(ts," in text

    rows = frame.collect()

    scan = plan.collectLeaves().apply(0)  # the FileSourceScanExec, its metrics now filled in
    assert scan.getClass().getSimpleName() == "FileSourceScanExec"
    assert scan.metrics().apply("numPartitions").value() == 3, "the files of 2026-01-01 are never read"
    assert min(row["ts"] for row in rows).isoformat() == "2026-01-02T12:00:00"


def test_a_look_back_too_short_for_the_lag_is_counted(grown: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(grown["incremental"], out)
    document = run(
        "timelag",
        "--input",
        str(grown["snapshots"]),
        "--out",
        str(out),
        "--since",
        "2026-01-04",
        "--lookback",
        "2h",
    )
    figures = document["figures"]
    assert figures["read_from"] == "2026-01-03T22:00:00+00:00"
    # Every partition that is behind waits for an offset written before 22:00 the day before.
    assert figures["rows_beyond_lookback"] > 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param(["timelag", "--since", "yesterday"], "not a date or time: 'yesterday'", id="words"),
        pytest.param(["rates", "--since", "2026-13-01"], "not a date or time: '2026-13-01'", id="month-13"),
        pytest.param(["forecast", "--since", ""], "not a date or time: ''", id="empty"),
        pytest.param(
            ["report", "--since", "2026-01-04"],
            "applies to rates, timelag, forecast, plan, backtest, compact, not report",
            id="report",
        ),
        pytest.param(
            ["plan", "--incremental"], "applies to rates, timelag, forecast, backtest, not plan", id="plan"
        ),
        pytest.param(
            ["timelag", "--since", "2026-01-04", "--incremental"], "(--since, --incremental)", id="both"
        ),
        pytest.param(["rates", "--lookback", "1h"], "applies to timelag", id="lookback-for-rates"),
        pytest.param(["timelag", "--lookback", "0s"], "(--lookback)", id="zero-lookback"),
    ],
)
def test_bad_since_values_exit_2_naming_the_option(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["pipeline", arguments[0], "--input", ".", *arguments[1:]])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert (
        "(--since" in result.stderr or "(--incremental)" in result.stderr or "(--lookback)" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("job", "option"),
    [pytest.param("rates", "--window", id="rates"), pytest.param("backtest", "--step", id="backtest")],
)
def test_windows_or_steps_that_straddle_midnight_cannot_resume(
    grown: dict[str, Path], tmp_path: Path, job: str, option: str
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            job,
            "--input",
            str(grown["snapshots"]),
            "--out",
            str(tmp_path),
            "--since",
            "2026-01-04",
            option,
            "7m",
        ],
    )
    assert result.exit_code == 2
    assert "must divide a day" in result.stderr
    assert result.stderr.rstrip().endswith(f"({option})")
