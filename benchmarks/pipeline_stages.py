"""Where `timelag` and `forecast` spend their time on Spark, stage by stage, next to one pandas
process doing the whole job on the same input (docs/design.md §10, issue 14's profile).

    .venv/bin/python benchmarks/pipeline_stages.py [--rows 10000000] [--rounds 3]
        [--data /tmp/gbench/data] [--master local[*]]

Each job is cut into prefixes, each run to the end and summed (so nothing of it is pruned), in one
warm driver JVM, round after round so that the noise of a shared machine falls on all alike:

- `timelag`: *scan* (read the Parquet files, seconds and lag per row); *stream shuffled and
  sorted* (`timelag.lookup_stream`: history points and rows to look up, hash-partitioned by
  (cluster, topic, partition) and sorted by `timelag.LOOKUP_ORDER`, the exchange and sort the
  Window operator needs, without the window); *whole job* (`timelag.timelag`).
- `forecast`: *scan*; *window rows* (`forecast.window_rows`: the newest-time aggregate and its
  broadcast join, the rows of the last 600 s); *window rows shuffled and sorted* (partitioned and
  sorted as the job's Window operator needs); *whole job* (`forecast.forecast`).

The whole jobs are `benchmarks/pipeline.py`'s, checksums and all; a prefix is summed on one
column, which its plan needs whole.

pandas runs the whole job in its own child per round (`benchmarks/pipeline.py`'s, same answers
cross-checked there). The input is `benchmarks/pipeline.py`'s synthetic history (written there
when missing: run that first with the same `--data`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import WINDOW_S, run_pandas, spark_jobs, write_history

Stage = Callable[[Any, Path], object]


def stages() -> dict[str, dict[str, Stage]]:
    from pyspark.sql import functions as sf  # noqa: PLC0415

    from groupops.pipeline import forecast, timelag  # noqa: PLC0415
    from groupops.pipeline.frames import PARTITION_KEYS, TOPIC_PARTITION_KEYS  # noqa: PLC0415
    from groupops.pipeline.io import InputSpec, read_snapshots  # noqa: PLC0415

    def read(spark: Any, path: Path) -> Any:
        return read_snapshots(spark, InputSpec(path=path))

    def total(frame: Any, column: str) -> object:
        return frame.agg(sf.sum(column), sf.count(sf.lit(1))).first()

    def scan(spark: Any, path: Path) -> object:
        return total(timelag.with_consumed(read(spark, path)), "t")

    def timelag_sorted(spark: Any, path: Path) -> object:
        stream = timelag.lookup_stream(timelag.with_consumed(read(spark, path)))
        ordered = stream.repartition(*TOPIC_PARTITION_KEYS).sortWithinPartitions(
            *TOPIC_PARTITION_KEYS, *timelag.LOOKUP_ORDER
        )
        return total(ordered, "t")

    def window_rows(spark: Any, path: Path) -> object:
        return total(forecast.window_rows(read(spark, path), window_s=WINDOW_S), "t")

    def forecast_sorted(spark: Any, path: Path) -> object:
        keys = (forecast.STREAM_KEY, *PARTITION_KEYS)
        rows = forecast.window_rows(read(spark, path), window_s=WINDOW_S)
        ordered = rows.repartition(*keys).sortWithinPartitions(*keys, *forecast.SAMPLE_ORDER)
        return total(ordered, "t")

    # The whole jobs as benchmarks/pipeline.py runs them: their checksums need every output
    # column (a sum of one column alone would let Spark prune, e.g., forecast's status).
    whole = spark_jobs("lag")
    return {
        "timelag": {
            "scan": scan,
            "stream shuffled and sorted": timelag_sorted,
            "whole job": whole["timelag"],
        },
        "forecast": {
            "scan": scan,
            "window rows": window_rows,
            "window rows shuffled and sorted": forecast_sorted,
            "whole job": whole["forecast"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", default="timelag,forecast")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--data", type=Path, required=True, help="benchmarks/pipeline.py's --data")
    parser.add_argument("--pandas-memory", default="12g")
    arguments = parser.parse_args()
    from groupops.pipeline.session import SessionSettings, build_session  # noqa: PLC0415

    spark = build_session(SessionSettings(master=arguments.master, driver_memory="6g", progress=False))
    path = arguments.data / f"snapshots-{arguments.rows}"
    if not path.is_dir():
        write_history(spark, arguments.rows, path)
    jobs = {name: runs for name, runs in stages().items() if name in arguments.jobs.split(",")}
    cap = int(float(arguments.pandas_memory.rstrip("gG")) * 2**30)
    for runs in jobs.values():  # warm-up: class loading, code generation, JIT
        for run in runs.values():
            run(spark, path)
    seconds: dict[tuple[str, str], list[float]] = {}
    for round_number in range(arguments.rounds):
        for job, runs in jobs.items():
            for stage, run in runs.items():
                started = time.perf_counter()
                run(spark, path)
                seconds.setdefault((job, stage), []).append(time.perf_counter() - started)
            outcome = run_pandas(job, path, "lag", cap)
            seconds.setdefault((job, "pandas, whole job"), []).append(float(outcome.get("seconds", "nan")))
        print(f"round {round_number + 1} done", flush=True)
    spark.stop()
    print(f"\n{arguments.rows:,} rows, {arguments.rounds} rounds, master {arguments.master}\n")
    print("| job | stage | each round (s) | median (s) | of Spark's whole job |")
    print("|---|---|---:|---:|---:|")
    for (job, stage), values in seconds.items():
        whole = statistics.median(seconds[(job, "whole job")])
        each = " / ".join(f"{v:.1f}" for v in values)
        median = statistics.median(values)
        print(f"| {job} | {stage} | {each} | {median:.1f} | {median / whole:.0%} |")


if __name__ == "__main__":
    main()
