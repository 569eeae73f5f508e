"""Pipeline throughput and memory: `timelag`, `forecast` and `plan` on PySpark against a single-
process pandas/numpy implementation of the same jobs, side by side in one run, on the same Parquet
input, at 1M, 10M and 50M snapshot rows.

    .venv/bin/python benchmarks/pipeline.py [--rows 1000000,10000000,50000000]
        [--jobs timelag,forecast,plan] [--master local[*]] [--data DIR] [--pandas-memory 12g]
        [--layouts plain,compacted] [--buckets 16] [--rounds N] [--per-round] [--json FILE]

Input: groupops.pipeline.synthetic histories of 50 partitions x 100 steps (10 s apart) per group
(1M rows = 200 groups, 10M = 2,000, 50M = 10,000), written once to Parquet partitioned by `date`
as `groupops snapshot` writes it (kept under `--data` for later runs; a temporary directory by
default). `--layouts compacted` also runs Spark on a copy compacted by `groupops pipeline compact`
(groupops.pipeline.layout: every date rewritten as `--buckets` buckets of (cluster, topic,
partition), read without a shuffle); the compaction's own time is printed once per size. pandas
reads the plain copy (the same rows). `--per-round` writes the plain copy as captures leave it, one
file per snapshot time (100 per date), instead of one per Spark task.

Spark runs the real transforms on `read_snapshots` (timelag.timelag; forecast.forecast with the
job's defaults, a 600 s window and a 300 s horizon; plan.latest_lag + plan.plan with `lag`) and
collects a checksum, so the whole transform is computed but nothing is written. It is warmed up,
untimed, on 50,000 rows first. Its peak memory is the largest resident set of the JVM and its
Python workers together (the process tree under the gateway's JVM, sampled every 50 ms while the
job runs; the JVM keeps the heap it grew for earlier jobs, so this is an upper bound per job).

pandas runs each job in a fresh child process that reads the Parquet files (timed) and computes
the same answers with numpy (vectorized; the plan calls the same groupops engine group after
group). Its peak memory is the child's high-water resident set (VmHWM). A child whose resident set
passes `--pandas-memory` is killed and recorded as out of memory, as is a MemoryError.

Both sides must agree before a line is printed: the total time lag within 1e-9 relative; the
forecast's status counts and forecast lag sum exactly, its rate sums within 1e-9 relative; every
group's max member lag exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

PARTITIONS, STEPS = 50, 100
WINDOW_S, HORIZON_S = 600.0, 300.0
JOBS = ("timelag", "forecast", "plan")
COLUMNS = ["ts", "cluster", "group", "topic", "partition", "log_start", "log_end", "committed", "member"]
PAGE = os.sysconf("SC_PAGE_SIZE")


def groups_for(rows: int) -> int:
    return rows // (PARTITIONS * STEPS)


# -- pandas / numpy, one process ------------------------------------------------------------------


def read_frame(path: Path) -> pd.DataFrame:
    """The snapshot rows as pandas, sorted as Spark's reader has no order to promise either."""
    return pq.read_table(path, columns=COLUMNS).to_pandas()


def seconds_of(frame: pd.DataFrame) -> np.ndarray:
    ts = frame["ts"] if frame["ts"].dt.tz is not None else frame["ts"].dt.tz_localize("UTC")
    return ((ts - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(np.float64)


def pandas_timelag(frame: pd.DataFrame) -> dict[str, Any]:
    """Seconds behind per row: the same definition as groupops.pipeline.timelag."""
    t = seconds_of(frame)
    key = frame.groupby(["cluster", "topic", "partition"], sort=False).ngroup().to_numpy().astype(np.int64)
    log_end = frame["log_end"].to_numpy(np.int64)
    committed = frame["committed"].fillna(frame["log_start"]).to_numpy(np.int64)
    shift = np.int64(1) << 40
    # History sorted by (partition, offset, time): the first point at or above an offset is the
    # earliest time the log end reached it; the one before is the last point below it.
    order = np.lexsort((t, log_end, key))
    h_key, h_off, h_t = key[order], log_end[order], t[order]
    del order
    h_code = h_key * shift + h_off
    q_code = key * shift + committed
    after = np.searchsorted(h_code, q_code, side="left")
    del h_code, q_code
    before = after - 1
    a_off, a_t = h_off[after], h_t[after]
    has_before = (before >= 0) & (h_key[np.maximum(before, 0)] == key)
    b_off, b_t = h_off[np.maximum(before, 0)], h_t[np.maximum(before, 0)]
    firsts = np.searchsorted(h_key, np.arange(key.max() + 1), side="left")
    lasts = np.searchsorted(h_key, np.arange(key.max() + 1), side="right") - 1
    rate = (h_off[lasts] - h_off[firsts]) / np.where(
        h_t[lasts] > h_t[firsts], h_t[lasts] - h_t[firsts], np.nan
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        interpolated = b_t + (committed - b_off) * (a_t - b_t) / (a_off - b_off)
        extrapolated = a_t - (a_off - committed) / rate[key]
    produced = np.where(a_off == committed, a_t, np.where(has_before, interpolated, extrapolated))
    time_lag = np.where(committed >= log_end, 0.0, np.maximum(0.0, t - produced))
    return {"total_time_lag_s": float(np.nansum(time_lag)), "rows": len(time_lag)}


def pandas_forecast(frame: pd.DataFrame) -> dict[str, Any]:
    """Lag at the horizon and Burrow's status per partition: the same definition as
    groupops.pipeline.forecast (window before each group's newest snapshot, first/last samples,
    consecutive pairs in (t, consumed, lag, log_end, member) order)."""
    t = seconds_of(frame)
    consumed = frame["committed"].fillna(frame["log_start"]).to_numpy(np.int64)
    log_end = frame["log_end"].to_numpy(np.int64)
    lag = np.maximum(0, log_end - consumed)
    group = frame.groupby(["cluster", "group"], sort=False).ngroup().to_numpy()
    now = np.full(group.max() + 1, -np.inf)
    np.maximum.at(now, group, t)
    recent = t >= now[group] - WINDOW_S
    rows = frame.loc[recent, ["cluster", "group", "topic", "partition", "member"]]
    key = rows.groupby(["cluster", "group", "topic", "partition"], sort=False).ngroup().to_numpy()
    t, consumed, log_end, lag = t[recent], consumed[recent], log_end[recent], lag[recent]
    member = rows["member"].to_numpy(object)
    order = np.lexsort((lag, consumed, t, key))  # member breaks no tie on this input
    key, t, consumed, log_end, lag, member = (a[order] for a in (key, t, consumed, log_end, lag, member))
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)] - 1
    n = ends - starts + 1
    span = t[ends] - t[starts]
    with np.errstate(divide="ignore"):
        per_second = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), np.nan)
    produce_rate = (log_end[ends] - log_end[starts]) * per_second
    consume_rate = (consumed[ends] - consumed[starts]) * per_second
    same = np.r_[False, key[1:] == key[:-1]]  # row i pairs with row i-1 in the same partition
    pair_rewind = same & np.r_[False, consumed[1:] < consumed[:-1]]
    pair_fell = same & np.r_[False, lag[1:] < lag[:-1]]
    moved = consumed != consumed[np.repeat(starts, n)]
    rewound = np.add.reduceat(pair_rewind, starts) > 0
    lag_fell = np.add.reduceat(pair_fell, starts) > 0
    caught_up = np.add.reduceat(lag == 0, starts) > 0
    stood_still = np.add.reduceat(moved, starts) == 0
    unowned = member[ends] == ""
    status = np.select(
        [n < 2, caught_up, rewound, stood_still & unowned, stood_still, ~lag_fell],
        ["UNKNOWN", "OK", "REWIND", "STOP", "STALL", "WARN"],
        default="OK",
    )
    raw = np.maximum(0.0, lag[ends] + (produce_rate - consume_rate) * HORIZON_S)
    forecast_lag = np.where(n >= 2, np.floor(raw + 0.5), lag[ends]).astype(np.int64)  # HALF_UP
    counts = pd.Series(status).value_counts()
    return {
        "partitions": len(starts),
        "status": {str(s): int(c) for s, c in counts.items()},
        "forecast_lag": int(forecast_lag.sum()),
        "produce_rate": float(np.nansum(produce_rate)),
        "consume_rate": float(np.nansum(consume_rate)),
    }


def pandas_plan(frame: pd.DataFrame, strategy: str) -> dict[str, Any]:
    """Latest lag per partition, then one engine call per group: group → max member lag."""
    from groupops.pipeline import plan  # noqa: PLC0415  (the engine, not Spark)

    lag = (frame["log_end"] - frame["committed"].fillna(frame["log_start"])).clip(lower=0)
    rows = frame.assign(lag=lag, member=frame["member"].fillna(""))
    newest = rows.groupby(["cluster", "group"])["ts"].transform("max")
    latest = rows[rows["ts"] == newest]
    result: dict[str, float] = {}
    for (_, group), part in latest.groupby(["cluster", "group"], sort=False):
        document = plan.group_document(
            strategy,
            zip(
                part["topic"],
                part["partition"].astype(int),
                part["lag"].astype(int),
                part["member"],
                strict=True,
            ),
        )
        _, stats = plan.plan_group(document)
        result[str(group)] = float(stats["max_member_lag"])
    return {"max_member_lag": result}


def pandas_child(job: str, path: Path, strategy: str) -> None:
    """Entry point of the pandas child process: time the read and the job, print one JSON line."""
    started = time.perf_counter()
    try:
        frame = read_frame(path)
        if job == "timelag":
            answer = pandas_timelag(frame)
        elif job == "forecast":
            answer = pandas_forecast(frame)
        else:
            answer = pandas_plan(frame, strategy)
        outcome: dict[str, Any] = {"seconds": time.perf_counter() - started, "answer": answer}
    except MemoryError:
        outcome = {"error": "MemoryError"}
    outcome["peak_rss"] = _status_kib(os.getpid(), "VmHWM") * 1024
    print(json.dumps(outcome), flush=True)


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run_pandas(job: str, path: Path, strategy: str, cap: int) -> dict[str, Any]:
    """Run a pandas child; kill it when its resident set passes `cap` bytes."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--pandas-child", job, str(path), "--strategy", strategy],
        stdout=subprocess.PIPE,
        text=True,
    )
    peak, killed = 0, False
    while child.poll() is None:
        try:
            rss = _status_kib(child.pid, "VmRSS") * 1024
        except OSError:
            break
        peak = max(peak, rss)
        if rss > cap:
            child.kill()
            killed = True
            break
        time.sleep(0.02)
    out, _ = child.communicate()
    if killed:
        return {
            "error": f"out of memory (resident set passed the {cap / 2**30:.0f} GiB cap)",
            "peak_rss": peak,
        }
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        return {"error": f"exit code {child.returncode}", "peak_rss": peak}
    outcome: dict[str, Any] = json.loads(lines[-1])
    if "error" in outcome:
        outcome["error"] = "out of memory (MemoryError)"
    return outcome


# -- Spark ---------------------------------------------------------------------------------------


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
        except OSError:
            continue
    return total


@contextmanager
def peak_memory(root: int) -> Iterator[list[int]]:
    """Samples the tree's resident set every 50 ms; yields a one-item list holding the peak."""
    peak = [tree_rss(root)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
        peak[0] = max(peak[0], tree_rss(root))


def spark_jobs(strategy: str) -> dict[str, Callable[[Any, Path], dict[str, Any]]]:
    from pyspark.sql import functions as sf  # noqa: PLC0415

    from groupops.pipeline import forecast, plan, timelag  # noqa: PLC0415
    from groupops.pipeline.io import InputSpec, read_snapshots  # noqa: PLC0415

    def spark_timelag(spark: Any, path: Path) -> dict[str, Any]:
        # The sum needs every row's time lag, so nothing of the transform is pruned.
        result = timelag.timelag(read_snapshots(spark, InputSpec(path=path)))
        row = result.agg(sf.sum("time_lag_s"), sf.count(sf.lit(1))).first()
        return {"total_time_lag_s": float(row[0] or 0.0), "rows": int(row[1])}

    def spark_forecast(spark: Any, path: Path) -> dict[str, Any]:
        result = forecast.forecast(
            read_snapshots(spark, InputSpec(path=path)), window_s=WINDOW_S, horizon_s=HORIZON_S
        )
        rows = (
            result.groupBy("status")
            .agg(
                sf.count(sf.lit(1)).alias("n"),
                sf.sum("forecast_lag").alias("forecast_lag"),
                sf.sum("produce_rate").alias("produce_rate"),
                sf.sum("consume_rate").alias("consume_rate"),
            )
            .collect()
        )
        return {
            "partitions": sum(int(r["n"]) for r in rows),
            "status": {r["status"]: int(r["n"]) for r in rows},
            "forecast_lag": sum(int(r["forecast_lag"]) for r in rows),
            "produce_rate": sum(float(r["produce_rate"] or 0.0) for r in rows),
            "consume_rate": sum(float(r["consume_rate"] or 0.0) for r in rows),
        }

    def spark_plan(spark: Any, path: Path) -> dict[str, Any]:
        lags = plan.latest_lag(read_snapshots(spark, InputSpec(path=path)))
        planned = plan.plan(lags, strategy=strategy).select("group", "max_member_lag")
        return {"max_member_lag": {r["group"]: float(r["max_member_lag"]) for r in planned.collect()}}

    return {"timelag": spark_timelag, "forecast": spark_forecast, "plan": spark_plan}


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def same_answer(job: str, spark: dict[str, Any], pandas: dict[str, Any]) -> bool:
    if job == "timelag":
        return spark["rows"] == pandas["rows"] and close(
            spark["total_time_lag_s"], pandas["total_time_lag_s"]
        )
    if job == "forecast":
        return (
            spark["status"] == pandas["status"]
            and spark["forecast_lag"] == pandas["forecast_lag"]
            and close(spark["produce_rate"], pandas["produce_rate"])
            and close(spark["consume_rate"], pandas["consume_rate"])
        )
    return bool(spark["max_member_lag"] == pandas["max_member_lag"])


def write_history(spark: Any, rows: int, path: Path, *, per_round: bool = False) -> None:
    """The synthetic history as Parquet by date: as Spark's tasks write it, or with `per_round` one
    file per snapshot time, as `groupops snapshot` writes one per capture round."""
    from pyspark.sql import functions as sf  # noqa: PLC0415

    from groupops.pipeline import synthetic  # noqa: PLC0415

    spec = synthetic.HistorySpec(groups=groups_for(rows), partitions=PARTITIONS, steps=STEPS)
    spec = synthetic.HistorySpec(
        groups=spec.groups, partitions=PARTITIONS, steps=STEPS, stall=(), stop=(), rewind=()
    )
    frame = synthetic.history(spark, spec).withColumn("date", sf.date_format("ts", "yyyy-MM-dd"))
    if per_round:
        frame = frame.repartitionByRange(STEPS, "ts")
    scratch = path.with_name(path.name + ".writing")
    frame.write.mode("overwrite").partitionBy("date").parquet(str(scratch))
    scratch.rename(path)


def gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def compacted_copy(spark: Any, path: Path, buckets: int) -> Path:
    """`path` copied once and compacted whole (every date, as `groupops pipeline compact` does)."""
    from groupops.pipeline import layout  # noqa: PLC0415

    target = path.with_name(f"{path.name}-compacted-{buckets}")
    if not target.is_dir():
        scratch = target.with_name(target.name + ".writing")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(path, scratch)
        started = time.perf_counter()
        done = layout.compact(spark, scratch, buckets=buckets, before=date.max)
        print(
            f"compacted {done.rows:,} rows of {len(done.dates)} dates, {done.files_before} files into "
            f"{done.files_after} in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        scratch.rename(target)
    return target


def line(rows: int, job: str, layout: str, spark: dict[str, Any], pandas: dict[str, Any]) -> dict[str, Any]:
    groups = groups_for(rows)
    unit, amount = ("groups/s", groups) if job == "plan" else ("rows/s", rows)
    record: dict[str, Any] = {
        "rows": rows,
        "groups": groups,
        "job": job,
        "layout": layout,
        "spark": spark,
        "pandas": pandas,
    }
    spark_rate = f"{amount / spark['seconds']:,.0f} {unit}"
    spark_groups = f"{groups / spark['seconds']:,.1f}"
    if "error" in pandas:
        pandas_cells = f"{pandas['error']} | — | — | {gib(pandas['peak_rss'])} | —"
    else:
        pandas_cells = (
            f"{pandas['seconds']:.1f} | {amount / pandas['seconds']:,.0f} {unit} | "
            f"{groups / pandas['seconds']:,.1f} | {gib(pandas['peak_rss'])} | "
            f"{pandas['seconds'] / spark['seconds']:.2f}x"
        )
    print(
        f"| {rows:,} | {groups:,} | {job} | {layout} | {spark['seconds']:.1f} | {spark_rate} | "
        f"{spark_groups} | {gib(spark['peak_rss'])} | {pandas_cells} |",
        flush=True,
    )
    return record


def print_medians(records: list[dict[str, Any]]) -> None:
    """Per size, job and input: the median Spark and pandas times over the rounds, and their ratio."""
    print("\n| rows | job | Spark's input | rounds | Spark median (s) | pandas median (s) | pandas / Spark |")
    print("|---:|---|---|---:|---:|---:|---:|")
    keys = dict.fromkeys((r["rows"], r["job"], r["layout"]) for r in records)
    for rows, job, layout in keys:
        mine = [r for r in records if (r["rows"], r["job"], r["layout"]) == (rows, job, layout)]
        spark_s = float(np.median([r["spark"]["seconds"] for r in mine]))
        pandas_times = [r["pandas"]["seconds"] for r in mine if "seconds" in r["pandas"]]
        pandas_s = float(np.median(pandas_times)) if pandas_times else float("nan")
        print(
            f"| {rows:,} | {job} | {layout} | {len(mine)} | {spark_s:.1f} | {pandas_s:.1f} | "
            f"{pandas_s / spark_s:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000,50000000")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--strategy", default="lag")
    parser.add_argument("--data", type=Path, help="keep the generated histories here (reused when present)")
    parser.add_argument("--pandas-memory", default="12g", help="resident-set cap of a pandas child")
    parser.add_argument("--no-pandas", action="store_true", help="Spark only (no cross-check)")
    parser.add_argument("--layouts", default="plain", help="Spark's input: plain, compacted or both")
    parser.add_argument("--buckets", type=int, default=16, help="the compacted copy's buckets per date")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each job (layouts alternating)")
    parser.add_argument(
        "--per-round",
        action="store_true",
        help="the plain input as captures leave it: a file per snapshot time",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--pandas-child", nargs=2, metavar=("JOB", "PATH"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.pandas_child:
        job, path = arguments.pandas_child
        pandas_child(job, Path(path), arguments.strategy)
        return
    cap = int(float(arguments.pandas_memory.rstrip("gG")) * 2**30)
    jobs = [job for job in arguments.jobs.split(",") if job]
    layouts = [name for name in arguments.layouts.split(",") if name]
    if not layouts or set(layouts) - {"plain", "compacted"}:
        parser.error(f"--layouts: plain, compacted or both, got {arguments.layouts!r}")
    from groupops.pipeline.session import SessionSettings, build_session  # noqa: PLC0415

    spark = build_session(SessionSettings(master=arguments.master, driver_memory="6g", progress=False))
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
    cores = spark.sparkContext.defaultParallelism
    print(f"Spark {spark.version}, master {arguments.master} ({cores} cores), load average {os.getloadavg()}")
    runners = spark_jobs(arguments.strategy)
    scratch = Path(tempfile.mkdtemp(prefix="groupops-bench-"))
    data = arguments.data or scratch
    data.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    try:
        # Warm-up on 50,000 rows, untimed: the first queries of a JVM pay for class loading, code
        # generation and JIT compilation, and the Python workers start.
        warm = scratch / "warm-up"
        write_history(spark, 50_000, warm)
        for job in jobs:
            for name in layouts:
                source = warm if name == "plain" else compacted_copy(spark, warm, arguments.buckets)
                runners[job](spark, source)
        print(
            "| rows | groups | job | Spark's input | Spark (s) | Spark rate | Spark groups/s "
            "| Spark peak RSS | pandas (s) | pandas rate | pandas groups/s | pandas peak RSS "
            "| pandas time / Spark time |"
        )
        print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for rows in (int(r) for r in arguments.rows.split(",")):
            path = data / f"snapshots-{rows}{'-per-round' if arguments.per_round else ''}"
            if not path.is_dir():
                write_history(spark, rows, path, per_round=arguments.per_round)
            inputs = {"plain": path}
            if "compacted" in layouts:
                inputs["compacted"] = compacted_copy(spark, path, arguments.buckets)
            for job in jobs:
                for round_ in range(arguments.rounds):
                    pandas_side: dict[str, Any] = {"error": "not run", "peak_rss": 0}
                    if not arguments.no_pandas:
                        pandas_side = run_pandas(job, path, arguments.strategy, cap)
                    # Alternate the order: the first of two runs of a job pays more (page cache, JIT).
                    for name in layouts if round_ % 2 == 0 else layouts[::-1]:
                        with peak_memory(jvm) as peak:
                            started = time.perf_counter()
                            answer = runners[job](spark, inputs[name])
                            seconds = time.perf_counter() - started
                        spark_side = {"seconds": seconds, "peak_rss": peak[0], "answer": answer}
                        if "answer" in pandas_side:
                            assert same_answer(job, answer, pandas_side["answer"]), (job, rows, name)
                        records.append(line(rows, job, name, spark_side, dict(pandas_side)))
        if arguments.rounds > 1:
            print_medians(records)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()}")
    if arguments.json:
        for record in records:
            for side in ("spark", "pandas"):
                record[side].pop("answer", None)
        arguments.json.write_text(json.dumps(records, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
