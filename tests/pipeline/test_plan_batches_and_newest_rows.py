"""`plan` plans many groups per Python call (groupops.pipeline.plan.plan_batches): a group cut by
an Arrow batch boundary is still planned once from all its rows, and every group gets exactly what
planning it alone gives. `at_newest` keeps the rows a window over the group keeps, ties and null
keys included."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pandas as pd
import pytest
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as sf

from groupops.pipeline import plan
from groupops.pipeline.frames import at_newest

pytestmark = pytest.mark.pipeline

LAG_COLUMNS = ["cluster", "group", "topic", "partition", "lag", "member"]


def lag_frame(groups: int, seed: int) -> pd.DataFrame:
    """`groups` groups of 1-30 partitions on 1-2 topics, 1-4 owners, one group owned by nobody."""
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        members = [f"m{i}" for i in range(rng.randint(1, 4))]
        for topic in [f"t{t}" for t in range(rng.randint(1, 2))]:
            for p in range(rng.randint(1, 15)):
                owner = "" if g == 3 else rng.choice([*members, ""])
                rows.append(("c1", f"g{g:03d}", topic, p, rng.randint(0, 10_000), owner))
    frame = pd.DataFrame(rows, columns=LAG_COLUMNS)
    return frame.sort_values(["cluster", "group"], kind="stable").reset_index(drop=True)


def one_group_at_a_time(frame: pd.DataFrame, strategy: str) -> dict[str, pd.DataFrame]:
    return {
        group: plan._plan_rows(strategy, (cluster, group), part).reset_index(drop=True)
        for (cluster, group), part in frame.groupby(["cluster", "group"], sort=False)
    }


def by_group(planned: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {str(g): part.reset_index(drop=True) for g, part in planned.groupby("group", sort=False)}


def batches_of(frame: pd.DataFrame, size: int) -> Iterator[pd.DataFrame]:
    for start in range(0, len(frame), size):
        yield frame.iloc[start : start + size].reset_index(drop=True)


@pytest.mark.parametrize(
    ("batch_rows", "strategy"),
    [
        pytest.param(1, "lag", id="one-row-batches"),
        pytest.param(7, "lag", id="groups-cut-by-batches"),
        pytest.param(7, "sticky", id="sticky-groups-cut-by-batches"),
        pytest.param(100_000, "range", id="everything-in-one-batch"),
    ],
)
def test_batched_plan_equals_one_group_at_a_time(batch_rows: int, strategy: str) -> None:
    frame = lag_frame(groups=20, seed=batch_rows)

    planned = pd.concat(list(plan.plan_batches(strategy, batches_of(frame, batch_rows))))

    expected = one_group_at_a_time(frame, strategy)
    got = by_group(planned)
    assert list(got) == list(expected)  # every group once, in input order
    for group, rows in expected.items():
        pd.testing.assert_frame_equal(got[group], rows, obj=group)


def test_no_batches_give_no_plans() -> None:
    assert list(plan.plan_batches("lag", iter([]))) == []


def test_spark_plan_with_small_arrow_batches_equals_one_group_at_a_time(spark: SparkSession) -> None:
    frame = lag_frame(groups=30, seed=11)
    lags = spark.createDataFrame(
        list(frame.itertuples(index=False)),
        "cluster string, group string, topic string, partition int, lag long, member string",
    )
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "5")  # nearly every group spans several batches
    try:
        planned = plan.plan(lags, strategy="lag").collect()
    finally:
        spark.conf.set(key, before)

    got = sorted(
        (
            r["group"],
            r["member"] or "",
            [(tp["topic"], tp["partition"]) for tp in r["partitions"]],
            r["member_lag"],
            r["max_member_lag"],
            r["moves"],
            r["error"],
        )
        for r in planned
    )
    expected = sorted(
        (
            group,
            r.member or "",
            [(tp["topic"], tp["partition"]) for tp in r.partitions],
            r.member_lag,
            r.max_member_lag,
            r.moves,
            r.error,
        )
        for group, rows in one_group_at_a_time(frame, "lag").items()
        for r in rows.itertuples(index=False)
    )
    assert got == expected


def test_at_newest_keeps_what_a_window_keeps(spark: SparkSession) -> None:
    rows = spark.createDataFrame(
        [
            ("c1", "a", 0, 1.0),
            ("c1", "a", 1, 2.0),
            ("c1", "a", 2, 2.0),  # a tie at the newest time: both rows stay
            ("c1", "b", 0, 5.0),
            ("c2", "a", 0, 1.0),  # same group name on another cluster
            (None, "a", 0, 3.0),
            (None, "a", 1, 4.0),  # null cluster: a group of its own
        ],
        "cluster string, group string, partition int, t double",
    )
    newest = sf.max("t").over(Window.partitionBy("cluster", "group"))
    by_window = rows.withColumn("newest", newest).where(sf.col("t") == sf.col("newest")).drop("newest")

    kept = at_newest(rows, time_column="t")

    assert kept.columns == rows.columns
    assert sorted(kept.collect(), key=str) == sorted(by_window.collect(), key=str)
    assert kept.count() == 5
