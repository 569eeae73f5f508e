"""`groupops pipeline <job>`: run one Spark job of groupops.pipeline.jobs.

    groupops pipeline rates|timelag|forecast|plan|backtest|report|generate|compact
        --input DIR|kafka://topic [--bootstrap-server B] --out DIR [--master URL | --remote sc://H:P]
        [--window 60s] [--horizon 5m] [--step 60s] [--strategy lag] [--lag current|forecast]
        [--strategies range,roundrobin,sticky,lag,balanced] [--rows N] [--output table|json|yaml]
        [--since DATE|TIME | --incremental] [--lookback 1d]   (rates, timelag, forecast, backtest;
                                                              plan: --since only)
        [--buckets 16] [--settle 1h]  (compact: --input is rewritten in place; --since DATE)
        [--py-files ZIP] [--archives ARCHIVE#DIR] [--executor-python PATH]  (cluster executors)

People get Spark's progress bar (on a terminal) and a rich summary; machines get one JSON (or
YAML) document with `--output json` (`yaml`). Bad options or input exit 2, Spark failures exit 1,
one line each.

spark-submit runs the same command through groupops/commands/spark_submit.py (docs/pipeline.md);
there the master comes from spark-submit unless --master is given.
"""

from __future__ import annotations

import math
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import DocumentOutput

if TYPE_CHECKING:  # Spark loads only when a job runs
    from groupops.pipeline.jobs import JobOptions
    from groupops.pipeline.session import ExecutorSettings

__all__ = ["pipeline_command", "register", "seconds_option"]

_JOBS_HELP = "generate, rates, timelag, forecast, plan, backtest, report or compact"
# A rate needs a minute of samples; Burrow's window wants several commits, 10 min at 10 s snapshots.
_DEFAULT_WINDOW_S = {"rates": 60.0, "forecast": 600.0, "plan": 600.0}


_SETTING_OPTIONS = {
    "executors.python": "--executor-python",
    "executors.py_files": "--py-files",
    "executors.archives": "--archives",
    "remote": "--remote",
}
"""The CLI option behind each session setting that can be refused."""


class LagChoice(StrEnum):
    current = "current"
    forecast = "forecast"


def register(app: typer.Typer) -> None:
    app.command("pipeline")(pipeline_command)


def seconds_option(text: str, option: str) -> float:
    """A duration option (`10s`, `5m`, `1m30s`) in seconds; exit 2 naming the option when bad."""
    from groupops.controller.spec import SpecError, parse_duration  # noqa: PLC0415

    try:
        value = parse_duration(text, where=option)
    except SpecError as e:
        fail(f"{e.message} ({option})")
    if value <= 0:
        fail(f"must be positive, got {text!r} ({option})")
    return value


def pipeline_command(
    job: Annotated[str, typer.Argument(help=f"The job: {_JOBS_HELP}.")],
    *,
    input_: Annotated[
        str | None,
        typer.Option("--input", "-i", help="Snapshots: a Parquet dataset directory, or kafka://topic."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Directory for the job's outputs.")] = Path(
        "pipeline-out"
    ),
    bootstrap: Annotated[str | None, options.bootstrap_server("Kafka brokers for a kafka:// input.")] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default local[*], or spark-submit's).")
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option("--remote", help="A Spark Connect server, sc://host:port, instead of a master."),
    ] = None,
    window: Annotated[
        str | None, typer.Option("--window", help="rates window (default 60s); forecast look-back (10m).")
    ] = None,
    horizon: Annotated[str, typer.Option("--horizon", help="forecast horizon.")] = "5m",
    step: Annotated[str, typer.Option("--step", help="backtest/report replay step.")] = "60s",
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="plan strategy.")] = "lag",
    lag: Annotated[
        LagChoice, typer.Option("--lag", help="plan on current or forecast lag.")
    ] = LagChoice.current,
    strategies: Annotated[
        str, typer.Option("--strategies", help="backtest strategies, comma separated.")
    ] = "range,roundrobin,sticky,lag,balanced",
    rows: Annotated[
        int,
        typer.Option(
            "--rows", help="generate: rows of synthetic history (50 partitions x 1,000 steps a group)."
        ),
    ] = 1_000_000,
    driver_memory: Annotated[str, typer.Option("--driver-memory", help="Spark driver heap.")] = "2g",
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="rates, timelag, forecast, plan, backtest: resume at a UTC date (2026-01-04) or ISO "
            "time, reading only what that needs and replacing only what it recomputes.",
        ),
    ] = None,
    incremental: Annotated[
        bool,
        typer.Option(
            "--incremental",
            help="rates, timelag, forecast, backtest: resume where the output ends (full run if none).",
        ),
    ] = False,
    lookback: Annotated[
        str | None,
        typer.Option("--lookback", help="timelag, incremental: history read before the resume point (1d)."),
    ] = None,
    buckets: Annotated[
        int | None,
        typer.Option("--buckets", help="compact: files per date, hashed by cluster, topic, partition (16)."),
    ] = None,
    settle: Annotated[
        str | None,
        typer.Option("--settle", help="compact: how long after a UTC date ends it is compacted (1h)."),
    ] = None,
    py_files: Annotated[
        list[str] | None,
        typer.Option("--py-files", help="Zip archives for the executors' Python path (the groupops wheel)."),
    ] = None,
    archives: Annotated[
        list[str] | None,
        typer.Option("--archives", help="Archives unpacked beside the executors (venv.tar.gz#env)."),
    ] = None,
    executor_python: Annotated[
        str | None,
        typer.Option(
            "--executor-python",
            help="The Python executors run (./env/bin/python); default the driver's interpreter path.",
        ),
    ] = None,
    output: Annotated[DocumentOutput, options.output()] = DocumentOutput.table,
) -> None:
    """Run one pipeline job on PySpark (docs/design.md §10; docs/pipeline.md)."""
    from groupops.assign import UnknownStrategyError, get_strategy  # noqa: PLC0415
    from groupops.pipeline import jobs, synthetic  # noqa: PLC0415
    from groupops.pipeline.io import PipelineInputError, parse_input, parse_since  # noqa: PLC0415
    from groupops.pipeline.session import ExecutorSettings, SessionSettingsError  # noqa: PLC0415

    if job not in jobs.JOB_NAMES:
        fail(f"unknown job {job!r}: choose one of {', '.join(jobs.JOB_NAMES)} (job)")
    names = tuple(name.strip() for name in strategies.split(",") if name.strip())
    for name, option in [(strategy, "--strategy"), *((n, "--strategies") for n in names)]:
        try:
            get_strategy(name)
        except UnknownStrategyError as e:
            fail(f"{e} ({option})")
    if rows <= 0:
        fail(f"must be positive, got {rows} (--rows)")
    spec = None
    try:
        spec = parse_input(input_, bootstrap=bootstrap) if input_ is not None else None
    except PipelineInputError as e:
        fail(f"{e.message} ({e.where})")
    if spec is None and job != "generate":
        fail(f"job {job!r} reads snapshots: give a directory or kafka://topic (--input)")
    resume_at = None
    if since is not None or incremental:
        flag = "--since" if since is not None else "--incremental"
        if since is not None and incremental:
            fail("give one of --since and --incremental, not both (--since, --incremental)")
        takers = jobs.SINCE_JOBS if since is not None else jobs.INCREMENTAL_JOBS
        if job not in takers:
            fail(f"{flag} applies to {', '.join(takers)}, not {job} ({flag})")
        if since is not None:
            try:
                resume_at = parse_since(since)
            except PipelineInputError as e:
                fail(f"{e.message} ({e.where})")
    if lookback is not None and job != "timelag":
        fail(f"--lookback applies to timelag, not {job} (--lookback)")
    for value, option in ((buckets, "--buckets"), (settle, "--settle")):
        if value is not None and job != "compact":
            fail(f"{option} applies to compact, not {job} ({option})")
    if spec is not None and spec.is_kafka and job == "compact":
        fail("compact rewrites a Parquet snapshot dataset in place, not a topic (--input)")
    history = synthetic.HistorySpec(groups=max(1, math.ceil(rows / (50 * 1000))), partitions=50, steps=1000)
    job_options = jobs.JobOptions(
        input=spec,
        out=out,
        window_s=seconds_option(window, "--window") if window else _DEFAULT_WINDOW_S.get(job, 60.0),
        horizon_s=seconds_option(horizon, "--horizon"),
        step_s=seconds_option(step, "--step"),
        strategy=strategy,
        lag=lag.value,
        strategies=names,
        history=history,
        since=resume_at,
        incremental=incremental,
        lookback_s=seconds_option(lookback, "--lookback") if lookback else float(jobs.DAY_S),
        settle_s=seconds_option(settle, "--settle") if settle else 3600.0,
        **({"buckets": buckets} if buckets is not None else {}),
    )
    for path, option in [
        *((p, "--py-files") for p in py_files or ()),
        *((a, "--archives") for a in archives or ()),
    ]:
        local = path.split("#", 1)[0]
        if "://" not in local and not Path(local).is_file():
            fail(f"no such file: {local} (a local path, or a URL Spark can fetch) ({option})")
    if remote is not None and master is not None:
        fail("give one of --master and --remote, not both: a Connect server has its own (--master, --remote)")
    try:
        executors = ExecutorSettings(
            python=executor_python, py_files=tuple(py_files or ()), archives=tuple(archives or ())
        )
    except SessionSettingsError as e:
        fail(f"{e.message} ({_SETTING_OPTIONS.get(e.setting, e.setting)})")
    _run(
        job,
        job_options,
        master=master,
        remote=remote,
        driver_memory=driver_memory,
        output=output,
        executors=executors,
    )


def _run(
    job: str,
    job_options: JobOptions,
    *,
    master: str | None,
    remote: str | None,
    driver_memory: str,
    output: DocumentOutput,
    executors: ExecutorSettings,
) -> None:
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from groupops.pipeline import jobs  # noqa: PLC0415
    from groupops.pipeline.io import PipelineInputError  # noqa: PLC0415
    from groupops.pipeline.session import SessionSettings, SessionSettingsError, build_session  # noqa: PLC0415

    console = Console(stderr=True)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    people = output is DocumentOutput.table
    try:
        settings = SessionSettings(
            master=master or (None if under_submit else "local[*]"),
            kafka=job_options.input is not None and job_options.input.is_kafka,
            driver_memory=driver_memory,
            progress=people and sys.stderr.isatty(),
            executors=executors,
            remote=remote,
        )
    except SessionSettingsError as e:
        fail(f"{e.message} ({_SETTING_OPTIONS.get(e.setting, e.setting)})")
    if people:
        console.print(
            f"[bold]groupops pipeline {job}[/] on "
            f"{settings.remote or settings.master or 'spark-submit master'} "
            f"→ {job_options.out}"
        )
    try:
        spark = build_session(settings)
        result = jobs.run_job(job, spark, job_options)
    except PipelineInputError as e:
        fail(f"{e.message} ({e.where})")
    except SessionSettingsError as e:
        fail(f"{e.message} ({_SETTING_OPTIONS.get(e.setting, e.setting)})")
    except (PySparkException, Py4JError, OSError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        fail(f"Spark job {job!r} failed: {first_line} (spark)", code=RUNTIME_FAILURE)
    if people:
        _print_summary(console, result.to_json())
    else:
        options.print_document(result.to_json(), output)


def _print_summary(console: Console, document: dict[str, Any]) -> None:
    table = Table(title=f"{document['job']} · {document['seconds']:.1f} s")
    table.add_column("output")
    table.add_column("rows", justify="right")
    table.add_column("path")
    for name, path in document["outputs"].items():
        count = document["rows"].get(name)
        table.add_row(name, "" if count is None else f"{count:,}", path)
    console.print(table)
    figures = document["figures"]
    if "strategies" in figures:
        scores = Table(title="strategies (mean over groups)")
        for column in ("strategy", "mean max member lag", "mean imbalance", "moves", "wins"):
            scores.add_column(column, justify="right")
        for name, row in sorted(figures["strategies"].items()):
            if row.get("error"):
                scores.add_row(name, row["error"], "", "", "")
                continue
            scores.add_row(
                name,
                f"{row['mean_max_member_lag']:,.0f}",
                f"{row['mean_imbalance']:.3f}",
                f"{row['moves']:,}",
                str(row["wins"]),
            )
        console.print(scores)
    if "files_before" in figures:
        console.print(
            f"compacted {len(figures['dates'])} dates ({', '.join(figures['dates']) or 'none due'}): "
            f"{figures['files_before']} files into {figures['files_after']}, {figures['buckets']} buckets"
        )
    if "status" in figures:
        console.print("status: " + ", ".join(f"{k} {v}" for k, v in figures["status"].items()))
        for row in figures.get("flagged", [])[:10]:
            console.print(
                f"  {row['status']:<6} {row['group']} {row['topic']}-{row['partition']} lag {row['lag']:,}"
            )
    if "slowest_groups" in figures:
        for row in figures["slowest_groups"]:
            seconds = row["max_time_lag_s"]
            shown = "n/a" if seconds is None else f"{seconds:,.1f} s"
            console.print(f"  {row['group']}: lag {row['lag']:,}, max time lag {shown}")
    other = {
        k: v for k, v in figures.items() if k not in {"strategies", "status", "flagged", "slowest_groups"}
    }
    if other:
        console.print(
            "  ".join(f"{k} {v:,.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in other.items())
        )
