"""A compacted dataset on a real cluster and through Spark Connect: the compaction's bucketed write
runs on the executors (or the Connect server), the jobs read the buckets without a shuffle there
too, and the answers are the plain dataset's (tests/pipeline/test_compacted_layout.py holds the
rest, on `local[2]`)."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from groupops.pipeline import forecast, layout, timelag
from tests.pipeline.test_compacted_layout import (
    BUCKETS,
    DAYS,
    assert_same_rows,
    physical_plan,
    row_exchanges,
    rows_of,
    write_captured,
)

pytestmark = pytest.mark.pipeline

SPARK_MASTERS = ("standalone", "connect")


def test_a_compacted_dataset_gives_the_same_answers_without_a_shuffle(
    tmp_path: Path, spark: SparkSession
) -> None:
    captured = write_captured(spark, tmp_path / "captured")
    dataset = shutil.copytree(captured, tmp_path / "snapshots")
    done = layout.compact(spark, dataset, buckets=BUCKETS, before=date(2026, 1, 5))

    assert done.dates == [d.isoformat() for d in DAYS]
    assert layout.compacted_dates(dataset, layout.read_layout(dataset)) == DAYS
    before, after = rows_of(spark, captured), rows_of(spark, dataset)
    assert_same_rows(before, after)
    assert_same_rows(timelag.timelag(before), timelag.timelag(after))
    window = {"window_s": 7200.0, "horizon_s": 1800.0}
    assert_same_rows(forecast.forecast(before, **window), forecast.forecast(after, **window))
    for frame in (timelag.timelag(after), forecast.forecast(after, **window)):
        plan = physical_plan(frame)
        assert "Bucketed: true" in plan and row_exchanges(plan) == [], plan
