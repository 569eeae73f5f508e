"""The job entry points: read the input, run the transforms, write the outputs, summarize.

This is the only place (with groupops.pipeline.io and .session) where the pipeline touches files,
Kafka or a session; `groupops pipeline <job>` and spark-submit (groupops/commands/spark_submit.py)
both call `run_job`. Outputs go under `options.out`:

    job        writes (Parquet unless said)
    generate   snapshots/ (a synthetic history, partitioned by date like `groupops snapshot`)
    rates      rates/
    timelag    timelag/, timelag_members/, timelag_groups/
    forecast   forecast/ (read by the `forecast` lag source)
    plan       plan/
    backtest   backtest_steps/, backtest/
    report     report/index.html + report/*.png (uses backtest/ when present, else computes it)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline import backtest, forecast, plan, rates, report, synthetic, timelag
from groupops.pipeline.io import InputSpec, PipelineInputError, read_snapshots, write_parquet

__all__ = ["JOB_NAMES", "JobOptions", "JobResult", "run_job"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Every job's options (each job reads the ones it needs).

    window_s: `rates` window and `forecast` look-back (Burrow's window); horizon_s: how far ahead
    `forecast` looks; step_s: `backtest`/`report` replay step; strategy: `plan`'s strategy;
    lag: `plan` on `current` lag or on the `forecast` job's output (computed here);
    strategies: what `backtest` compares; history: what `generate` writes.
    """

    input: InputSpec | None
    out: Path
    window_s: float = 60.0
    horizon_s: float = 300.0
    step_s: float = 60.0
    strategy: str = "lag"
    lag: str = "current"
    strategies: tuple[str, ...] = backtest.BACKTEST_STRATEGIES
    history: synthetic.HistorySpec = field(default_factory=synthetic.HistorySpec)


@dataclass(slots=True)
class JobResult:
    """What a job did: outputs (name → path), their row counts, job figures, wall time."""

    job: str
    outputs: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "outputs": self.outputs,
            "rows": self.rows,
            "figures": self.figures,
            "seconds": round(self.seconds, 3),
        }


def _snapshots(spark: SparkSession, options: JobOptions) -> DataFrame:
    if options.input is None:
        raise PipelineInputError("this job needs snapshots", "--input")
    return read_snapshots(spark, options.input)


def _write(result: JobResult, name: str, frame: DataFrame, out: Path) -> None:
    path = out / name
    result.rows[name] = write_parquet(frame, path)
    result.outputs[name] = str(path)


def _generate(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    frame = synthetic.history(spark, options.history).withColumn("date", sf.date_format("ts", "yyyy-MM-dd"))
    path = options.out / "snapshots"
    frame.write.mode("overwrite").partitionBy("date").parquet(str(path))
    result.outputs["snapshots"] = str(path)
    result.rows["snapshots"] = options.history.rows


def _rates(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    _write(result, "rates", rates.rates(_snapshots(spark, options), window_s=options.window_s), options.out)
    stored = spark.read.parquet(result.outputs["rates"])
    figures = stored.agg(
        sf.countDistinct("cluster", "group", "topic", "partition").alias("partitions"),
        sf.avg("produce_rate").alias("mean_produce_rate"),
        sf.avg("consume_rate").alias("mean_consume_rate"),
    ).first()
    result.figures.update(figures.asDict() if figures else {})


def _timelag(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    _write(result, "timelag", timelag.timelag(_snapshots(spark, options)), options.out)
    per_partition = spark.read.parquet(result.outputs["timelag"])
    _write(result, "timelag_members", timelag.timelag_by_member(per_partition), options.out)
    _write(result, "timelag_groups", timelag.timelag_by_group(per_partition), options.out)
    groups = spark.read.parquet(result.outputs["timelag_groups"]).orderBy(sf.col("max_time_lag_s").desc())
    result.figures["slowest_groups"] = [
        {
            "cluster": r["cluster"],
            "group": r["group"],
            "lag": int(r["lag"] or 0),
            "max_time_lag_s": r["max_time_lag_s"],
        }
        for r in groups.limit(10).collect()
    ]


def _forecast_frame(spark: SparkSession, options: JobOptions) -> DataFrame:
    return forecast.forecast(
        _snapshots(spark, options), window_s=options.window_s, horizon_s=options.horizon_s
    )


def _forecast(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    _write(result, "forecast", _forecast_frame(spark, options), options.out)
    stored = spark.read.parquet(result.outputs["forecast"])
    counts = {r["status"]: int(r["count"]) for r in stored.groupBy("status").count().collect()}
    result.figures["status"] = {status: counts.get(status, 0) for status in forecast.STATUSES}
    flagged = stored.where(sf.col("status").isin("STOP", "STALL", "REWIND")).orderBy(sf.col("lag").desc())
    result.figures["flagged"] = [
        {k: r[k] for k in ("cluster", "group", "topic", "partition", "status", "lag")}
        for r in flagged.limit(20).collect()
    ]


def _plan(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    if options.lag == "forecast":
        lags = _forecast_frame(spark, options).select(
            "cluster",
            "group",
            "topic",
            "partition",
            sf.col("forecast_lag").alias("lag"),
            sf.coalesce(sf.col("member"), sf.lit("")).alias("member"),
        )
    else:
        lags = plan.latest_lag(_snapshots(spark, options))
    _write(result, "plan", plan.plan(lags, strategy=options.strategy), options.out)
    stored = spark.read.parquet(result.outputs["plan"])
    per_group = stored.groupBy("cluster", "group").agg(
        sf.first("imbalance").alias("imbalance"),
        sf.first("moves").alias("moves"),
        sf.first("error").alias("error"),
    )
    figures = per_group.agg(
        sf.count(sf.lit(1)).alias("groups"),
        sf.avg("imbalance").alias("mean_imbalance"),
        sf.sum("moves").alias("moves"),
        sf.count("error").alias("groups_with_error"),
    ).first()
    result.figures.update(
        {"strategy": options.strategy, "lag": options.lag, **(figures.asDict() if figures else {})}
    )


def _backtest_frames(spark: SparkSession, options: JobOptions, result: JobResult) -> DataFrame:
    points = backtest.replay_points(_snapshots(spark, options), step_s=options.step_s)
    _write(result, "backtest_steps", backtest.backtest(points, strategies=options.strategies), options.out)
    steps = spark.read.parquet(result.outputs["backtest_steps"])
    _write(result, "backtest", backtest.summarize(steps), options.out)
    return spark.read.parquet(result.outputs["backtest"])


def _strategy_figures(summary: DataFrame) -> dict[str, Any]:
    rows = summary.groupBy("strategy").agg(
        sf.avg("mean_max_member_lag").alias("mean_max_member_lag"),
        sf.avg("mean_imbalance").alias("mean_imbalance"),
        sf.sum("total_moves").alias("moves"),
        sf.sum(sf.when(sf.col("rank") == 1, 1).otherwise(0)).alias("wins"),
        sf.first("error", ignorenulls=True).alias("error"),
    )
    return {r["strategy"]: {k: r[k] for k in r.asDict() if k != "strategy"} for r in rows.collect()}


def _backtest(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    result.figures["strategies"] = _strategy_figures(_backtest_frames(spark, options, result))


def _report(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    existing = options.out / "backtest"
    if (existing / "_SUCCESS").is_file():
        summary = spark.read.parquet(str(existing))
    else:
        summary = _backtest_frames(spark, options, result)
    lag = report.lag_over_time(_snapshots(spark, options), step_s=options.step_s).toPandas()
    files = report.render_report(options.out / "report", lag=lag, summary=summary.toPandas())
    result.outputs["report"] = str(files.html)
    for chart in files.charts:
        result.outputs[chart.stem] = str(chart)
    result.figures["strategies"] = _strategy_figures(summary)


JobRunner = Callable[[SparkSession, JobOptions, JobResult], None]

_JOBS: dict[str, JobRunner] = {
    "generate": _generate,
    "rates": _rates,
    "timelag": _timelag,
    "forecast": _forecast,
    "plan": _plan,
    "backtest": _backtest,
    "report": _report,
}

JOB_NAMES: tuple[str, ...] = tuple(_JOBS)


def run_job(name: str, spark: SparkSession, options: JobOptions) -> JobResult:
    """Run one job; KeyError for an unknown name (the CLI validates names first)."""
    runner = _JOBS[name]
    result = JobResult(job=name)
    started = time.monotonic()
    runner(spark, options, result)
    result.seconds = time.monotonic() - started
    return result
