"""Pipeline throughput: `timelag` rows/s and `plan` groups planned/s on PySpark against a single-
process pandas/numpy implementation of the same two jobs, side by side in one run, on the same
Parquet input, for 1M and 10M snapshot rows.

    .venv/bin/python benchmarks/pipeline.py [--rows 1000000,10000000] [--master local[*]]

Input: groupops.pipeline.synthetic histories of 50 partitions x 100 steps per group (1M rows = 200
groups, 10M rows = 2,000 groups), written once to Parquet under a temporary directory. Spark runs
the real transforms (timelag.timelag; plan.latest_lag + plan.plan with `lag`) and collects a
checksum (the sum of all time lags; each group's max member lag), so the whole transform is computed
but nothing is written; pandas builds its result in memory. Both read the Parquet files in the timed
part. Spark is first warmed up, untimed, on 50,000 rows. The pandas timelag is a vectorized numpy
as-of lookup (searchsorted on one (partition, offset) key), not a Python loop; the pandas plan calls
the same groupops engine group after group. Both sides are checked to give the same total time lag
and the same max member lags before the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline import plan, synthetic, timelag
from groupops.pipeline.io import InputSpec, read_snapshots
from groupops.pipeline.session import SessionSettings, build_session

PARTITIONS, STEPS = 50, 100


def spec_for(rows: int) -> synthetic.HistorySpec:
    groups = rows // (PARTITIONS * STEPS)
    return synthetic.HistorySpec(
        groups=groups, partitions=PARTITIONS, steps=STEPS, stall=(), stop=(), rewind=()
    )


# -- pandas / numpy, one process ------------------------------------------------------------------


def pandas_timelag(frame: pd.DataFrame) -> pd.DataFrame:
    """Seconds behind per row: the same definition as groupops.pipeline.timelag."""
    ts = frame["ts"] if frame["ts"].dt.tz is not None else frame["ts"].dt.tz_localize("UTC")
    t = ((ts - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(np.float64)
    key = frame.groupby(["cluster", "topic", "partition"], sort=False).ngroup().to_numpy().astype(np.int64)
    log_end = frame["log_end"].to_numpy(np.int64)
    committed = frame["committed"].fillna(frame["log_start"]).to_numpy(np.int64)
    shift = np.int64(1) << 40
    # History sorted by (partition, offset, time): the first point at or above an offset is the
    # earliest time the log end reached it; the one before is the last point below it.
    order = np.lexsort((t, log_end, key))
    h_key, h_off, h_t = key[order], log_end[order], t[order]
    h_code = h_key * shift + h_off
    q_code = key * shift + committed
    after = np.searchsorted(h_code, q_code, side="left")
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
    return frame.assign(time_lag_s=time_lag)


def pandas_plan(frame: pd.DataFrame, strategy: str) -> dict[str, float]:
    """Latest lag per partition, then one engine call per group: group → max member lag."""
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
    return result


# -- Spark ---------------------------------------------------------------------------------------


def spark_timelag(spark: SparkSession, path: Path) -> float:
    # One pass: the sum needs every row's time lag, so nothing of the transform is pruned.
    result = timelag.timelag(read_snapshots(spark, InputSpec(path=path)))
    total = result.agg(sf.sum("time_lag_s")).first()
    return float(total[0]) if total else 0.0


def spark_plan(spark: SparkSession, path: Path, strategy: str) -> dict[str, float]:
    planned = plan.plan(plan.latest_lag(read_snapshots(spark, InputSpec(path=path))), strategy=strategy)
    return {
        r["group"]: float(r["max_member_lag"]) for r in planned.select("group", "max_member_lag").collect()
    }


def read_then(job: Any, path: Path, *args: Any) -> Any:
    """The pandas side's whole job: read the Parquet dataset, then compute."""
    return job(pq.read_table(path).to_pandas(), *args)


def timed(function: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - started, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--strategy", default="lag")
    arguments = parser.parse_args()
    spark = build_session(SessionSettings(master=arguments.master, driver_memory="6g", progress=False))
    cores = spark.sparkContext.defaultParallelism
    load = os.getloadavg()[0]
    print(f"Spark {spark.version}, master {arguments.master} ({cores} cores), load average {load:.1f}")
    print(
        "| rows | groups | job | Spark (s) | Spark rate | pandas (s) | pandas rate "
        "| pandas time / Spark time |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="groupops-bench-") as scratch:
        # Warm-up on 50,000 rows, untimed: the first queries of a JVM pay for class loading, code
        # generation and JIT compilation (a minute on two busy cores), and the Python workers start.
        warm = Path(scratch) / "warm-up"
        synthetic.history(spark, spec_for(50_000)).write.parquet(str(warm))
        spark_timelag(spark, warm)
        spark_plan(spark, warm, arguments.strategy)
        for rows in (int(r) for r in arguments.rows.split(",")):
            spec = spec_for(rows)
            path = Path(scratch) / f"snapshots-{rows}"
            synthetic.history(spark, spec).write.parquet(str(path))

            spark_s, spark_total = timed(spark_timelag, spark, path)
            pandas_s, pandas_result = timed(read_then, pandas_timelag, path)
            pandas_total = float(pandas_result["time_lag_s"].sum())
            assert abs(spark_total - pandas_total) <= 1e-6 * max(1.0, abs(pandas_total)), (
                spark_total,
                pandas_total,
            )
            del pandas_result
            print(
                f"| {rows:,} | {spec.groups:,} | timelag | {spark_s:.1f} | {rows / spark_s:,.0f} rows/s | "
                f"{pandas_s:.1f} | {rows / pandas_s:,.0f} rows/s | {pandas_s / spark_s:.2f}x |",
                flush=True,
            )

            spark_s, spark_plans = timed(spark_plan, spark, path, arguments.strategy)
            pandas_s, pandas_plans = timed(read_then, pandas_plan, path, arguments.strategy)
            assert spark_plans == pandas_plans
            print(
                f"| {rows:,} | {spec.groups:,} | plan ({arguments.strategy}) | {spark_s:.1f} | "
                f"{spec.groups / spark_s:,.1f} groups/s | {pandas_s:.1f} | "
                f"{spec.groups / pandas_s:,.1f} groups/s | {pandas_s / spark_s:.2f}x |",
                flush=True,
            )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
