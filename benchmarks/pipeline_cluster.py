"""The pipeline on a Spark standalone cluster (a master and 2 workers of 1 core each, all on this
machine) against `local[*]`: `timelag`, `forecast` and `plan` on the same Parquet input, at 1M and
10M snapshot rows by default.

    .venv/bin/python benchmarks/pipeline_cluster.py [--rows 1000000,10000000]
        [--jobs timelag,forecast,plan] [--layouts plain,compacted] [--buckets 16] [--data DIR]
        [--json FILE]

Input: groupops.pipeline.synthetic histories (as `groupops pipeline generate` writes them) of 50
partitions x 100 steps per group, written once to Parquet partitioned by `date` (kept under
`--data` for later runs; a temporary directory by default). `--layouts compacted` also runs each
job on a copy compacted as `groupops pipeline compact` does (benchmarks/pipeline.py's
`compacted_copy`, kept beside the plain one).

Each job is the real transform on `read_snapshots` followed by a small aggregate that needs every
row of it (nothing is pruned, nothing written): timelag.timelag and the sum of the time lags;
forecast.forecast (600 s window, 300 s horizon) and its status counts and forecast-lag sum;
plan.latest_lag + plan.plan (`lag`) and every group's max member lag. Both masters must give the
same answers before a line is printed.

One process holds one SparkContext at a time, so the script runs every size on `local[*]` first,
stops that session, starts the cluster (groupops.devstack.spark_cluster) and runs them again
there. Both sessions have a 2g driver and 8 shuffle partitions (4 per core, the local default); the
cluster's executors get Spark's default 1g each, the wheel as a py-file and a Python without
groupops, exactly as the tests run them. Each master is warmed up, untimed, on 50,000 rows first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import compacted_copy

PARTITIONS, STEPS = 50, 100
WINDOW_S, HORIZON_S = 600.0, 300.0
JOBS = ("timelag", "forecast", "plan")
SHUFFLE_PARTITIONS = 8

Runner = Callable[[Any, Path], dict[str, Any]]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def runners() -> dict[str, Runner]:
    from pyspark.sql import functions as sf  # noqa: PLC0415

    from groupops.pipeline import forecast, plan, timelag  # noqa: PLC0415
    from groupops.pipeline.io import InputSpec, read_snapshots  # noqa: PLC0415

    def run_timelag(spark: Any, path: Path) -> dict[str, Any]:
        result = timelag.timelag(read_snapshots(spark, InputSpec(path=path)))
        row = result.agg(sf.sum("time_lag_s"), sf.count(sf.lit(1))).first()
        return {"total_time_lag_s": float(row[0] or 0.0), "rows": int(row[1])}

    def run_forecast(spark: Any, path: Path) -> dict[str, Any]:
        result = forecast.forecast(
            read_snapshots(spark, InputSpec(path=path)), window_s=WINDOW_S, horizon_s=HORIZON_S
        )
        rows = result.groupBy("status").agg(sf.count(sf.lit(1)), sf.sum("forecast_lag")).collect()
        return {"status": {r[0]: (int(r[1]), int(r[2])) for r in rows}}

    def run_plan(spark: Any, path: Path) -> dict[str, Any]:
        lags = plan.latest_lag(read_snapshots(spark, InputSpec(path=path)))
        planned = plan.plan(lags, strategy="lag").select("group", "max_member_lag", "error")
        rows = planned.collect()
        assert all(r["error"] is None for r in rows)
        return {"max_member_lag": {r["group"]: float(r["max_member_lag"]) for r in rows}}

    return {"timelag": run_timelag, "forecast": run_forecast, "plan": run_plan}


def same_answer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal, except that a sum of doubles may differ in its last bits (another summing order)."""
    if "total_time_lag_s" in a:
        x, y = a["total_time_lag_s"], b["total_time_lag_s"]
        return a["rows"] == b["rows"] and abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))
    return a == b


def write_history(spark: Any, rows: int, path: Path) -> None:
    from pyspark.sql import functions as sf  # noqa: PLC0415

    from groupops.pipeline import synthetic  # noqa: PLC0415

    spec = synthetic.HistorySpec(
        groups=max(1, rows // (PARTITIONS * STEPS)), partitions=PARTITIONS, steps=STEPS
    )
    frame = synthetic.history(spark, spec).withColumn("date", sf.date_format("ts", "yyyy-MM-dd"))
    scratch = path.with_name(path.name + ".writing")
    frame.write.mode("overwrite").partitionBy("date").parquet(str(scratch))
    scratch.rename(path)


Input = tuple[int, str, Path]
"""Rows, layout (plain or compacted) and the dataset's path."""


def measure(
    spark: Any, master: str, inputs: list[Input], jobs: list[str], warm: Path
) -> dict[tuple[int, str, str], dict[str, Any]]:
    run = runners()
    for job in jobs:
        run[job](spark, warm)
    results = {}
    for rows, layout, path in inputs:
        for job in jobs:
            started = time.perf_counter()
            answer = run[job](spark, path)
            seconds = time.perf_counter() - started
            results[(rows, layout, job)] = {"seconds": seconds, "answer": answer}
            print(f"  {master}: {rows:,} rows ({layout}) {job} {seconds:.1f} s", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--data", type=Path, help="keep the generated histories here (reused when present)")
    parser.add_argument("--layouts", default="plain", help="plain, compacted or both")
    parser.add_argument("--buckets", type=int, default=16, help="the compacted copy's buckets per date")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    arguments = parser.parse_args()
    jobs = [job for job in arguments.jobs.split(",") if job]
    layouts = [name for name in arguments.layouts.split(",") if name]
    if not layouts or set(layouts) - {"plain", "compacted"}:
        parser.error(f"--layouts: plain, compacted or both, got {arguments.layouts!r}")

    from groupops.devstack.spark_cluster import SparkCluster, executor_python, package_zip  # noqa: PLC0415
    from groupops.pipeline.session import ExecutorSettings, SessionSettings, build_session  # noqa: PLC0415

    def session_settings(master: str, executors: ExecutorSettings | None = None) -> SessionSettings:
        return SessionSettings(
            master=master,
            driver_memory="2g",
            progress=False,
            shuffle_partitions=SHUFFLE_PARTITIONS,
            executors=executors or ExecutorSettings(),
        )

    print(f"start: {uptime()}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="groupops-cluster-bench-"))
    data = arguments.data or scratch
    data.mkdir(parents=True, exist_ok=True)
    try:
        spark = build_session(session_settings("local[*]"))
        warm = scratch / "warm-up"
        write_history(spark, 50_000, warm)
        inputs: list[Input] = []
        for rows in (int(r) for r in arguments.rows.split(",")):
            path = data / f"snapshots-{rows}"
            if not path.is_dir():
                write_history(spark, rows, path)
            copies = {"plain": path}
            if "compacted" in layouts:
                copies["compacted"] = compacted_copy(spark, path, arguments.buckets)
            inputs.extend((rows, layout, copies[layout]) for layout in layouts)
        local = measure(spark, "local[*]", inputs, jobs, warm)
        spark.stop()

        shipping = ExecutorSettings(python=str(executor_python()), py_files=(str(package_zip()),))
        with SparkCluster(scratch / "cluster") as cluster:
            spark = build_session(session_settings(cluster.url, shipping))
            standalone = measure(spark, "standalone", inputs, jobs, warm)
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"end: {uptime()}")

    print(
        "| rows | job | input | local[*] (s) | standalone, 2 workers (s) | standalone / local "
        "| local rate | standalone rate |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    records = []
    for rows, layout, _ in inputs:
        groups = rows // (PARTITIONS * STEPS)
        for job in jobs:
            a, b = local[(rows, layout, job)], standalone[(rows, layout, job)]
            assert same_answer(a["answer"], b["answer"]), (rows, layout, job)
            assert same_answer(a["answer"], local[(rows, layouts[0], job)]["answer"]), (rows, layout, job)
            unit, amount = ("groups/s", groups) if job == "plan" else ("rows/s", rows)
            print(
                f"| {rows:,} | {job} | {layout} | {a['seconds']:.1f} | {b['seconds']:.1f} | "
                f"{b['seconds'] / a['seconds']:.2f}x | {amount / a['seconds']:,.0f} {unit} | "
                f"{amount / b['seconds']:,.0f} {unit} |"
            )
            records.append(
                {
                    "rows": rows,
                    "job": job,
                    "layout": layout,
                    "local_s": a["seconds"],
                    "standalone_s": b["seconds"],
                }
            )
    if arguments.json:
        arguments.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
