"""`compact` rewrites a snapshot dataset's ended dates as buckets of (cluster, topic, partition)
(groupops.pipeline.layout, docs/design.md §10): the dataset keeps exactly its rows, every job
gives the same rows on it, the compacted dates are read without a shuffle, a capture file that
arrives later is read and compacted again, and a compaction killed at any step loses nothing.

The history: 4 days (2026-01-01 to 2026-01-04) of 3 groups x 8 partitions, a snapshot every 20
minutes, appended in 12 writes as captures append (several files per date)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from typer.testing import CliRunner

from groupops.cli import app
from groupops.pipeline import forecast, jobs, layout, synthetic, timelag
from groupops.pipeline.io import InputSpec, read_snapshots
from groupops.pipeline.schema import SnapshotRow
from groupops.pipeline.snapshot import ParquetSink
from tests.pipeline.child import child_environment

pytestmark = pytest.mark.pipeline

SPEC = synthetic.HistorySpec(groups=3, partitions=8, steps=288, step_s=1200)
DAYS = [date(2026, 1, d) for d in (1, 2, 3, 4)]
BUCKETS = 4
LATE: SnapshotRow = {
    "ts": datetime(2026, 1, 2, 23, 59, 50, tzinfo=UTC).timestamp(),
    "cluster": SPEC.cluster,
    "group": "late-group",
    "topic": "t0000",
    "partition": 0,
    "log_start": 0,
    "log_end": 10,
    "committed": 5,
    "member": "m-0",
}
"""A snapshot of 2026-01-02 written after that day was compacted (a capture's last round)."""


def write_captured(spark: SparkSession, path: Path) -> Path:
    """The dataset as captures leave it: many files per date."""
    history = synthetic.history(spark, SPEC).withColumn("round", sf.floor(sf.rand(seed=7) * 12))
    for part in range(12):
        rows = history.where(sf.col("round") == part).drop("round")
        rows.withColumn("date", sf.date_format("ts", "yyyy-MM-dd")).coalesce(1).write.mode(
            "append"
        ).partitionBy("date").parquet(str(path))
    return path


@pytest.fixture(scope="module")
def captured(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Written once per module; each test compacts its own copy (`dataset`)."""
    return write_captured(spark, tmp_path_factory.mktemp("captured") / "snapshots")


@pytest.fixture
def dataset(captured: Path, tmp_path: Path) -> Path:
    path = tmp_path / "snapshots"
    shutil.copytree(captured, path)
    return path


def rows_of(spark: SparkSession, path: Path) -> DataFrame:
    return read_snapshots(spark, InputSpec(path=path))


def assert_same_rows(left: DataFrame, right: DataFrame) -> None:
    assert left.count() == right.count()
    assert left.exceptAll(right).count() == 0
    assert right.exceptAll(left).count() == 0


def physical_plan(frame: DataFrame) -> str:
    """What `explain()` prints (a Spark Connect client too): the physical plan."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain()
    return printed.getvalue()


def row_exchanges(plan: str) -> list[str]:
    """The plan's hash exchanges of snapshot rows: all but the newest-time aggregate's (keyed by
    the group hash of `frames.recent`, one partial maximum per group and task)."""
    return [
        line for line in plan.splitlines() if "Exchange hashpartitioning" in line and "__key_hash" not in line
    ]


def test_compaction_keeps_every_row_and_every_job_answer(
    spark: SparkSession, captured: Path, dataset: Path
) -> None:
    done = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))

    assert done.dates == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert done.rows == SPEC.groups * SPEC.partitions * 216  # 72 snapshots a day, three days
    assert done.files_before == 36 and done.files_after == 3 * BUCKETS
    dataset_layout = layout.read_layout(dataset)
    assert dataset_layout == layout.DatasetLayout(buckets=BUCKETS)
    assert layout.compacted_dates(dataset, dataset_layout) == DAYS[:3]
    before, after = rows_of(spark, captured), rows_of(spark, dataset)
    assert_same_rows(before, after)
    assert_same_rows(timelag.timelag(before), timelag.timelag(after))
    window = {"window_s": 7200.0, "horizon_s": 1800.0}
    assert_same_rows(forecast.forecast(before, **window), forecast.forecast(after, **window))
    # pyarrow (the benchmark's pandas, any other reader) sees the same rows: markers start with `_`.
    assert pq.read_table(dataset).num_rows == before.count()


def read_tables(spark: SparkSession) -> set[str]:
    return {t.name for t in spark.catalog.listTables() if t.name.startswith("groupops_snapshots_")}


def test_a_job_drops_the_tables_of_its_compacted_reads_and_keeps_the_dataset(
    spark: SparkSession, dataset: Path, tmp_path: Path
) -> None:
    layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    rows = pq.read_table(dataset).num_rows
    before = read_tables(spark)
    answers = []
    for run in ("first", "second"):
        options = jobs.JobOptions(input=InputSpec(path=dataset), out=tmp_path / run)
        result = jobs.run_job("timelag", spark, options)
        assert read_tables(spark) == before  # a session that runs jobs all day keeps no table per run
        answers.append(spark.read.parquet(result.outputs["timelag"]))
    # The tables were external: the dataset keeps every row and file, and reads the same again.
    assert pq.read_table(dataset).num_rows == rows
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS[:3]
    assert answers[0].count() == rows
    assert_same_rows(answers[0], answers[1])


def test_compacted_dates_are_read_without_a_shuffle_and_only_new_dates_move(
    spark: SparkSession, dataset: Path
) -> None:
    layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    mixed = physical_plan(timelag.timelag(rows_of(spark, dataset)))
    assert "Bucketed: true" in mixed
    # Only the plain date's rows move, hash-partitioned as the buckets are; the window's union of
    # them with the buckets needs no exchange of its own.
    exchanges = row_exchanges(mixed)
    assert exchanges and all("REPARTITION_BY_NUM" in line for line in exchanges), mixed

    layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 5))
    whole = rows_of(spark, dataset)
    for frame in (timelag.timelag(whole), forecast.forecast(whole, window_s=7200.0, horizon_s=1800.0)):
        plan = physical_plan(frame)
        assert row_exchanges(plan) == [], plan
        assert "Bucketed: true" in plan


def test_a_late_capture_file_is_read_and_compacted_again(spark: SparkSession, dataset: Path) -> None:
    layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    rows = rows_of(spark, dataset).count()
    ParquetSink(dataset).write([LATE])

    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == [DAYS[0], DAYS[2]]
    assert rows_of(spark, dataset).count() == rows + 1
    again = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    assert again.dates == ["2026-01-02"]
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS[:3]
    assert rows_of(spark, dataset).where(sf.col("group") == "late-group").count() == 1
    assert rows_of(spark, dataset).count() == rows + 1


def test_a_capture_file_written_during_the_compaction_stays(
    spark: SparkSession, captured: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_swap = layout._swap
    captures = []

    def swap_after_a_capture(root: Path, day: str, read: list[str]) -> None:
        if day == "2026-01-02" and not captures:
            ParquetSink(root).write([LATE])  # after the files were read, before the swap
            captures.append(day)
        real_swap(root, day, read)

    monkeypatch.setattr(layout, "_swap", swap_after_a_capture)
    done = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))

    assert done.dates == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == [DAYS[0], DAYS[2]]
    assert rows_of(spark, dataset).where(sf.col("group") == "late-group").count() == 1
    assert rows_of(spark, dataset).count() == rows_of(spark, captured).count() + 1


def test_another_bucket_count_rewrites_every_date(spark: SparkSession, captured: Path, dataset: Path) -> None:
    layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 3))
    done = layout.compact(spark, dataset, buckets=3, before=date(2026, 1, 4))
    assert done.dates == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS[:3]
    assert_same_rows(rows_of(spark, captured), rows_of(spark, dataset))


class Killed(Exception):
    """The compaction's process dying at one step."""


@pytest.mark.parametrize("step", ["before-the-swap", "date-moved-away", "date-swapped"])
def test_a_killed_compaction_loses_nothing(
    spark: SparkSession, captured: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    real_swap = layout._swap
    calls = []

    def dying_swap(root: Path, day: str, read: list[str]) -> None:
        calls.append(day)
        if len(calls) < 2:
            real_swap(root, day, read)
            return
        name = f"date={day}"
        if step == "date-moved-away":
            (root / layout.REPLACED).mkdir(exist_ok=True)
            (root / name).rename(root / layout.REPLACED / name)
        elif step == "date-swapped":
            (root / layout.REPLACED).mkdir(exist_ok=True)
            (root / name).rename(root / layout.REPLACED / name)
            (root / layout.STAGING / name).rename(root / name)
        raise Killed(step)

    monkeypatch.setattr(layout, "_swap", dying_swap)
    with pytest.raises(Killed):
        layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    monkeypatch.setattr(layout, "_swap", real_swap)
    if step == "date-moved-away":
        assert not (dataset / "date=2026-01-02").exists()  # the crash is real: the date is gone

    assert layout.recover(dataset) == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert not (dataset / layout.STAGING).exists() and not (dataset / layout.REPLACED).exists()
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS[:3]
    assert_same_rows(rows_of(spark, captured), rows_of(spark, dataset))


def test_a_compaction_killed_while_writing_leaves_the_dataset_as_it_was(
    spark: SparkSession, captured: Path, dataset: Path
) -> None:
    staged = dataset / layout.STAGING / "date=2026-01-01"
    staged.mkdir(parents=True)
    (staged / "part-00000-half-written_00000.c000.snappy.parquet").write_bytes(b"PAR1")

    done = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 2))
    assert done.recovered == [] and done.dates == ["2026-01-01"]
    assert not (dataset / layout.STAGING).exists()
    assert_same_rows(rows_of(spark, captured), rows_of(spark, dataset))


def test_a_compaction_sigkilled_while_writing_loses_nothing(
    spark: SparkSession, captured: Path, dataset: Path, tmp_path: Path
) -> None:
    """A real `groupops pipeline compact` process (and its JVM) killed with SIGKILL while Spark
    writes the staged files: the dataset reads as before, and the next run compacts it."""
    command = "import sys; from groupops.cli import main; sys.argv[0] = 'groupops'; main()"
    arguments = ["pipeline", "compact", "--input", str(dataset), "--out", str(tmp_path), "--buckets", "4"]
    process = subprocess.Popen(
        [sys.executable, "-c", command, *arguments],
        env=child_environment(),
        process_group=0,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    staging = dataset / layout.STAGING
    deadline = time.monotonic() + 240
    try:
        while not staging.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert staging.exists(), "the compaction never started writing"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert not (staging / layout.READY).exists()
    assert_same_rows(rows_of(spark, captured), rows_of(spark, dataset))

    done = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 5))
    assert done.recovered == [] and done.dates == [d.isoformat() for d in DAYS]
    assert_same_rows(rows_of(spark, captured), rows_of(spark, dataset))


def test_a_second_compaction_at_once_is_refused(spark: SparkSession, dataset: Path) -> None:
    with open(dataset / layout.LOCK_FILE, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a first compaction, in another process, holds it
        with pytest.raises(layout.LayoutError, match="another compaction of this dataset is running"):
            layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 4))
    assert layout.read_layout(dataset) is None
    assert layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 2)).dates == ["2026-01-01"]


def test_bad_compactions_name_the_problem(spark: SparkSession, dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(layout.LayoutError, match=r"must be 1\.\.10000, got 0 \(--buckets\)"):
        layout.compact(spark, dataset, buckets=0, before=date(2026, 1, 4))
    flat = tmp_path / "flat"
    flat.mkdir()
    with pytest.raises(layout.LayoutError, match="partitioned by date=yyyy-mm-dd"):
        layout.compact(spark, flat, before=date(2026, 1, 4))
    (dataset / layout.LAYOUT_FILE).write_text('{"buckets": 4}')
    with pytest.raises(layout.LayoutError, match="unreadable layout marker"):
        rows_of(spark, dataset)


def test_the_compact_command(spark: SparkSession, dataset: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    topic = ["--input", "kafka://snapshots", "--bootstrap-server", "127.0.0.1:9"]
    refused = runner.invoke(app, ["pipeline", "compact", *topic])
    assert refused.exit_code == 2 and "not a topic (--input)" in refused.output
    misplaced = runner.invoke(app, ["pipeline", "timelag", "--input", str(dataset), "--buckets", "4"])
    assert misplaced.exit_code == 2 and "--buckets applies to compact, not timelag" in misplaced.output
    done = runner.invoke(
        app,
        [
            "pipeline",
            "compact",
            "--input",
            str(dataset),
            "--out",
            str(tmp_path / "out"),
            "--buckets",
            "2",
            "--since",
            "2026-01-03",
            "--output",
            "json",
        ],
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["figures"]["dates"] == ["2026-01-03", "2026-01-04"]
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS[2:]
