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
    compact    nothing under `out`: rewrites the --input dataset's ended dates in place as buckets
               (groupops.pipeline.layout), which every job then reads without a shuffle

`rates/` and `timelag/` are partitioned by the UTC date of their time (`date=yyyy-mm-dd`, like the
snapshots), so that an incremental run can replace whole dates and nothing else.

Incremental runs (rates, timelag, forecast, plan, backtest; docs/pipeline.md "Incremental runs",
design §10): the run resumes at `since` (explicit, or with `incremental` the start of the newest
date already in the job's output; `plan` takes `since` only) and reads only the snapshots it needs
from there:

    job       reads from                  writes
    rates     midnight(since)             the dates from midnight(since) on, replaced
    timelag   midnight(since) − lookback  the same; timelag_members/_groups: recomputed groups replaced
    forecast  since − window              forecast/: groups whose newest snapshot is ≥ since replaced
    plan      since (− window, on         plan/: groups whose newest snapshot is ≥ since replaced
              forecast lag)
    backtest  midnight(since)             backtest_steps/: the dates from there on, replaced;
                                          backtest/: summarized again from every date

Each gives exactly the rows a full run over the same dataset gives, provided the earlier run saw
every row before `since` (late rows older than that need a full run) and, for `timelag`, every
group is less than `lookback` behind in time: rows whose time lag reaches back to the first
snapshot read are counted in the figure `rows_beyond_lookback` (0 means exact).

What executors on a cluster need to run `plan` and `backtest`, whose pandas UDFs import groupops
there (py-files, archives, their Python), is the session's: `session.ExecutorSettings`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline import backtest, forecast, layout, plan, rates, report, synthetic, timelag
from groupops.pipeline.frames import GROUP_KEYS, TOPIC_PARTITION_KEYS, seconds
from groupops.pipeline.io import (
    InputSpec,
    PipelineInputError,
    dataset_dates,
    midnight,
    read_snapshots,
    replace_groups,
    timestamp_literal,
    write_dated,
    write_parquet,
)

__all__ = [
    "INCREMENTAL_JOBS",
    "JOB_NAMES",
    "SINCE_JOBS",
    "JobOptions",
    "JobResult",
    "resume_point",
    "run_job",
]

SINCE_JOBS = ("rates", "timelag", "forecast", "plan", "backtest", "compact")
"""The jobs that take `since` (see the module docstring; `compact` rewrites only dates from there)."""

INCREMENTAL_JOBS = ("rates", "timelag", "forecast", "backtest")
"""The jobs that take `incremental`: their output says where it ends (`plan/` holds no time)."""

_RESUME_OUTPUT = {"backtest": "backtest_steps"}
"""The output whose dates say where an incremental run resumes, where it is not the job's name."""

DAY_S = 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Every job's options (each job reads the ones it needs).

    window_s: `rates` window and `forecast` look-back (Burrow's window); horizon_s: how far ahead
    `forecast` looks; step_s: `backtest`/`report` replay step; strategy: `plan`'s strategy;
    lag: `plan` on `current` lag or on the `forecast` job's output (computed here);
    strategies: what `backtest` compares; history: what `generate` writes.
    buckets: `compact`'s files per date; settle_s: how long after a date ends `compact` takes it
    (a capture may still write a late snapshot of the day before).
    since: resume at this moment (aware, UTC) instead of reading everything; incremental: resume
    where the output ends (`resume_point`); lookback_s: how far before `since` `timelag` reads
    (a day: groups up to a day behind get exact time lags).
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
    since: datetime | None = None
    incremental: bool = False
    lookback_s: float = float(DAY_S)
    buckets: int = layout.DEFAULT_BUCKETS
    settle_s: float = 3600.0


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


def _snapshots(spark: SparkSession, options: JobOptions, *, since: datetime | None = None) -> DataFrame:
    if options.input is None:
        raise PipelineInputError("this job needs snapshots", "--input")
    return read_snapshots(spark, options.input, since=since)


def resume_point(spark: SparkSession, job: str, options: JobOptions) -> datetime | None:
    """Where an incremental run of `job` starts: `options.since` when given (rates, timelag and
    backtest round it down to its UTC midnight: their outputs are replaced by whole dates); with
    `options.incremental`, the start of the newest date already in the job's output (for
    forecast, the date of its newest snapshot); None for a full run (neither given, or no output
    yet)."""
    if job not in SINCE_JOBS or (options.since is None and not options.incremental):
        return None
    if options.since is not None:
        return options.since if job in {"forecast", "plan"} else midnight(options.since)
    if job not in INCREMENTAL_JOBS:
        raise PipelineInputError(
            f"{job} resumes only at a given --since: its output holds no time to resume from", "--incremental"
        )
    stored = options.out / _RESUME_OUTPUT.get(job, job)
    if job == "forecast":
        if not (stored / "_SUCCESS").is_file():
            return None
        # As microseconds: collect() would turn a timestamp into the driver's local time.
        newest = spark.read.parquet(str(stored)).agg(sf.unix_micros(sf.max("ts")).alias("us")).first()
        micros = None if newest is None else newest["us"]
        return None if micros is None else midnight(datetime.fromtimestamp(micros / 1_000_000, UTC))
    dates = dataset_dates(stored)
    return None if not dates else datetime(dates[-1].year, dates[-1].month, dates[-1].day, tzinfo=UTC)


def _mark_run(result: JobResult, since: datetime | None, **read: datetime) -> None:
    result.figures["mode"] = "full" if since is None else "incremental"
    result.figures["since"] = None if since is None else since.isoformat()
    for name, moment in read.items():
        result.figures[name] = moment.isoformat()


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


def _check_divides_a_day(seconds: float, what: str, option: str) -> None:
    """An incremental run recomputes whole dates: a `what` of `seconds` must divide a day, so
    that none straddles midnight; PipelineInputError naming `option` otherwise."""
    if DAY_S % seconds:
        raise PipelineInputError(
            f"an incremental run recomputes whole dates, so the {what} must divide a day (86400 s) "
            f"and never straddle midnight; got {seconds:g} s",
            option,
        )


def _rates(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    since = resume_point(spark, "rates", options)
    if since is not None:
        _check_divides_a_day(options.window_s, "window", "--window")
    _mark_run(result, since)
    frame = rates.rates(_snapshots(spark, options, since=since), window_s=options.window_s)
    path = options.out / "rates"
    result.rows["rates"] = write_dated(frame, path, time_column="window_start", since=since)
    result.outputs["rates"] = str(path)
    stored = spark.read.parquet(result.outputs["rates"])
    figures = stored.agg(
        sf.countDistinct("cluster", "group", "topic", "partition").alias("partitions"),
        sf.avg("produce_rate").alias("mean_produce_rate"),
        sf.avg("consume_rate").alias("mean_consume_rate"),
    ).first()
    result.figures.update(figures.asDict() if figures else {})


def _timelag(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    since = resume_point(spark, "timelag", options)
    path = options.out / "timelag"
    result.outputs["timelag"] = str(path)
    if since is None:
        _mark_run(result, since)
        result.rows["timelag"] = write_dated(
            timelag.timelag(_snapshots(spark, options)), path, time_column="ts"
        )
        per_partition = spark.read.parquet(str(path))
        _write(result, "timelag_members", timelag.timelag_by_member(per_partition), options.out)
        _write(result, "timelag_groups", timelag.timelag_by_group(per_partition), options.out)
    else:
        read_from = since - timedelta(seconds=options.lookback_s)
        _mark_run(result, since, read_from=read_from)
        snapshots = _snapshots(spark, options, since=read_from)
        fresh = timelag.timelag(snapshots).where(sf.col("ts") >= timestamp_literal(since))
        result.rows["timelag"] = write_dated(fresh, path, time_column="ts", since=since)
        per_partition = spark.read.parquet(str(path)).where(sf.col("date") >= sf.lit(since.date()))
        result.figures["rows_beyond_lookback"] = _beyond_lookback(per_partition, snapshots)
        for name, table in (
            ("timelag_members", timelag.timelag_by_member(per_partition)),
            ("timelag_groups", timelag.timelag_by_group(per_partition)),
        ):
            result.rows[name] = replace_groups(table, options.out / name, keys=GROUP_KEYS)
            result.outputs[name] = str(options.out / name)
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


def _beyond_lookback(per_partition: DataFrame, snapshots: DataFrame) -> int:
    """New time-lag rows that may differ from a full run's: behind, and produced (t − time lag)
    no later than the first snapshot read of their partition, so the offset they wait for may
    have been written before the look-back (design §10)."""
    first = snapshots.groupBy(*TOPIC_PARTITION_KEYS).agg(sf.min(seconds(sf.col("ts"))).alias("first_t"))
    produced_at = seconds(sf.col("ts")) - sf.col("time_lag_s")
    doubtful = per_partition.join(first, list(TOPIC_PARTITION_KEYS)).where(
        (sf.col("time_lag_s") > 0) & (produced_at <= sf.col("first_t"))
    )
    return int(doubtful.count())


def _forecast_frame(spark: SparkSession, options: JobOptions, *, since: datetime | None = None) -> DataFrame:
    read_from = None if since is None else since - timedelta(seconds=options.window_s)
    return forecast.forecast(
        _snapshots(spark, options, since=read_from), window_s=options.window_s, horizon_s=options.horizon_s
    )


def _forecast(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    since = resume_point(spark, "forecast", options)
    if since is None:
        _mark_run(result, since)
        _write(result, "forecast", _forecast_frame(spark, options), options.out)
    else:
        _mark_run(result, since, read_from=since - timedelta(seconds=options.window_s))
        # A group whose newest snapshot is before `since` has only part of its window here.
        fresh = _forecast_frame(spark, options, since=since).where(sf.col("ts") >= timestamp_literal(since))
        path = options.out / "forecast"
        result.rows["forecast"] = replace_groups(fresh, path, keys=GROUP_KEYS)
        result.outputs["forecast"] = str(path)
    stored = spark.read.parquet(result.outputs["forecast"])
    counts = {r["status"]: int(r["count"]) for r in stored.groupBy("status").count().collect()}
    result.figures["status"] = {status: counts.get(status, 0) for status in forecast.STATUSES}
    flagged = stored.where(sf.col("status").isin("STOP", "STALL", "REWIND")).orderBy(sf.col("lag").desc())
    result.figures["flagged"] = [
        {k: r[k] for k in ("cluster", "group", "topic", "partition", "status", "lag")}
        for r in flagged.limit(20).collect()
    ]


def _plan(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    """A group is planned at its newest snapshot, so an incremental run plans exactly the groups
    with a snapshot at or after `since` (their newest rows are all read) and keeps the others'
    plans: nothing newer could change them (design §10)."""
    since = resume_point(spark, "plan", options)
    if options.lag == "forecast":
        forecasts = _forecast_frame(spark, options, since=since)
        if since is not None:
            # A group whose newest snapshot is before `since` has only part of its window here.
            forecasts = forecasts.where(sf.col("ts") >= timestamp_literal(since))
        lags = forecasts.select(
            "cluster",
            "group",
            "topic",
            "partition",
            sf.col("forecast_lag").alias("lag"),
            sf.coalesce(sf.col("member"), sf.lit("")).alias("member"),
        )
    else:
        lags = plan.latest_lag(_snapshots(spark, options, since=since))
    planned = plan.plan(lags, strategy=options.strategy)
    if since is None:
        _mark_run(result, since)
        _write(result, "plan", planned, options.out)
    else:
        read_from = since - timedelta(seconds=options.window_s) if options.lag == "forecast" else since
        _mark_run(result, since, read_from=read_from)
        path = options.out / "plan"
        result.rows["plan"] = replace_groups(planned, path, keys=GROUP_KEYS)
        result.outputs["plan"] = str(path)
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
    """Each date is one replay (`backtest.REPLAY_SPAN_S`), so an incremental run replays the dates
    from `since`'s midnight on and replaces those dates of `backtest_steps/`; the summary is
    computed again from every stored date (design §10)."""
    since = resume_point(spark, "backtest", options)
    if since is not None:
        _check_divides_a_day(options.step_s, "step", "--step")
    _mark_run(result, since)
    points = backtest.replay_points(_snapshots(spark, options, since=since), step_s=options.step_s)
    path = options.out / "backtest_steps"
    result.rows["backtest_steps"] = write_dated(
        backtest.backtest(points, strategies=options.strategies), path, time_column="step_ts", since=since
    )
    result.outputs["backtest_steps"] = str(path)
    steps = spark.read.parquet(str(path)).drop("date")
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


def _compact(spark: SparkSession, options: JobOptions, result: JobResult) -> None:
    root = None if options.input is None else options.input.path
    if root is None:
        raise PipelineInputError(
            "compact rewrites a Parquet snapshot dataset in place: give its directory", "--input"
        )
    ended_before = (datetime.now(UTC) - timedelta(seconds=options.settle_s)).date()
    since = None if options.since is None else options.since.date()
    done = layout.compact(spark, root, buckets=options.buckets, before=ended_before, since=since)
    result.outputs["snapshots"] = str(root)
    result.rows["snapshots"] = done.rows
    result.figures.update(
        buckets=options.buckets,
        dates=done.dates,
        files_before=done.files_before,
        files_after=done.files_after,
        recovered=done.recovered,
        ended_before=ended_before.isoformat(),
    )


_JOBS: dict[str, JobRunner] = {
    "generate": _generate,
    "rates": _rates,
    "timelag": _timelag,
    "forecast": _forecast,
    "plan": _plan,
    "backtest": _backtest,
    "report": _report,
    "compact": _compact,
}

JOB_NAMES: tuple[str, ...] = tuple(_JOBS)


def run_job(name: str, spark: SparkSession, options: JobOptions) -> JobResult:
    """Run one job; KeyError for an unknown name (the CLI validates names first)."""
    runner = _JOBS[name]
    result = JobResult(job=name)
    started = time.monotonic()
    with layout.tables_released(spark):
        runner(spark, options, result)
    result.seconds = time.monotonic() - started
    return result
