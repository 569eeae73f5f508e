"""A generated history of 1,000,000 snapshot rows with known answers (groupops.pipeline.synthetic):
rates and time lag equal the analytic values, the forecast equals the closed form on linear
series, and Burrow's STOP / STALL / REWIND are flagged exactly where they were planted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline import forecast, rates, synthetic, timelag

pytestmark = pytest.mark.pipeline

SPEC = synthetic.HistorySpec(groups=20, partitions=50, steps=1000, step_s=10)
WINDOW_S = 60
FORECAST_WINDOW_S = 300
HORIZON_S = 600
# Offsets are exact integers; the only error is floating point in the interpolation.
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def history(spark: SparkSession) -> Iterator[DataFrame]:
    frame = synthetic.history(spark, SPEC).cache()
    assert frame.count() == SPEC.rows >= 1_000_000
    yield frame
    frame.unpersist()


@pytest.fixture(scope="module")
def params(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        synthetic.partition_params(SPEC),
        "group string, topic string, partition int, g int, r int, s int, expected string",
    )


def seconds_since_start(column: str) -> sf.Column:
    return sf.unix_seconds(sf.col(column)) - sf.lit(SPEC.start)


def test_planted_cells_are_in_range() -> None:
    planted = [*SPEC.stall, *SPEC.stop, *SPEC.rewind]
    assert all(g < SPEC.groups and p < SPEC.partitions for g, p in planted)
    assert SPEC.stuck_from_s < SPEC.last_t - FORECAST_WINDOW_S
    assert SPEC.last_t - FORECAST_WINDOW_S < SPEC.rewind_at_s <= SPEC.last_t


def test_rates_equal_the_analytic_rates(history: DataFrame, params: DataFrame) -> None:
    result = rates.rates(history, window_s=WINDOW_S).join(params, ["group", "topic", "partition"])
    first_t, last_t = seconds_since_start("first_ts"), seconds_since_start("last_ts")
    g, p = sf.col("g"), sf.col("partition")
    expected_consume = (
        synthetic.committed_column(SPEC, g, p, last_t) - synthetic.committed_column(SPEC, g, p, first_t)
    ) / (last_t - first_t)
    checked = result.agg(
        sf.count(sf.lit(1)).alias("windows"),
        sf.max(sf.abs(sf.col("produce_rate") - sf.col("r"))).alias("produce_error"),
        sf.max(sf.abs(sf.col("consume_rate") - expected_consume)).alias("consume_error"),
        sf.min("samples").alias("min_samples"),
        sf.max("samples").alias("max_samples"),
        sf.sum(sf.when(sf.col("consume_rate") == 0, 1).otherwise(0)).alias("standing_windows"),
    ).first()
    assert checked is not None
    windows_per_partition = -(-SPEC.steps * SPEC.step_s // WINDOW_S)
    assert checked["windows"] == SPEC.groups * SPEC.partitions * windows_per_partition
    assert checked["produce_error"] < TOLERANCE
    assert checked["consume_error"] < TOLERANCE
    assert (checked["min_samples"], checked["max_samples"]) == (4, WINDOW_S // SPEC.step_s)
    # The stuck partitions stand still in every window from stuck_from on, and nothing else does.
    stuck_windows = (SPEC.last_t - SPEC.stuck_from_s) // WINDOW_S + 1
    assert checked["standing_windows"] == (len(SPEC.stall) + len(SPEC.stop)) * stuck_windows


def test_time_lag_is_lag_over_produce_rate(history: DataFrame, params: DataFrame) -> None:
    result = timelag.timelag(history).join(params, ["group", "topic", "partition"])
    checked = result.agg(
        sf.count(sf.lit(1)).alias("rows"),
        sf.count("time_lag_s").alias("known"),
        sf.max(sf.abs(sf.col("time_lag_s") - sf.col("lag") / sf.col("r"))).alias("error"),
        sf.max("time_lag_s").alias("largest"),
    ).first()
    assert checked is not None
    assert checked["rows"] == checked["known"] == SPEC.rows
    assert checked["error"] < TOLERANCE
    assert checked["largest"] > 10_000  # the early rows need extrapolation below the first sample


def test_time_lag_per_member_and_group_at_the_newest_snapshot(history: DataFrame) -> None:
    per_partition = timelag.timelag(history.where(sf.col("group") == "g0002"))
    members = {row["member"]: row for row in timelag.timelag_by_member(per_partition).collect()}
    # g0002's partition 3 is the planted STOP: no owner at the end.
    assert set(members) == {"", "m0", "m1", "m2", "m3", "m4"}
    assert members[""]["partitions"] == 1
    assert sum(row["partitions"] for row in members.values()) == SPEC.partitions
    (group,) = timelag.timelag_by_group(per_partition).collect()
    assert group["lag"] == sum(row["lag"] for row in members.values())
    assert group["max_time_lag_s"] == max(row["max_time_lag_s"] for row in members.values())


def test_forecast_is_the_closed_form_and_flags_exactly_the_planted(
    history: DataFrame, params: DataFrame
) -> None:
    result = forecast.forecast(history, window_s=FORECAST_WINDOW_S, horizon_s=HORIZON_S).join(
        params, ["group", "topic", "partition"]
    )
    rows = result.select(
        "g", "partition", "status", "expected", "forecast_lag", "lag", "r", "s", "samples"
    ).collect()
    assert len(rows) == SPEC.groups * SPEC.partitions
    statuses = {(row["g"], row["partition"]): row["status"] for row in rows}
    assert {cell for cell, status in statuses.items() if status == "STALL"} == set(SPEC.stall)
    assert {cell for cell, status in statuses.items() if status == "STOP"} == set(SPEC.stop)
    assert {cell for cell, status in statuses.items() if status == "REWIND"} == set(SPEC.rewind)
    assert [row for row in rows if row["status"] != row["expected"]] == []
    linear = [row for row in rows if row["status"] != "REWIND"]
    assert all(row["samples"] == FORECAST_WINDOW_S // SPEC.step_s + 1 for row in rows)
    wrong = [
        row for row in linear if row["forecast_lag"] != max(0, row["lag"] + (row["r"] - row["s"]) * HORIZON_S)
    ]
    assert wrong == []


def test_one_sample_in_the_window_is_unknown_and_forecasts_todays_lag(spark: SparkSession) -> None:
    one = synthetic.history(spark, synthetic.HistorySpec(groups=1, partitions=2, steps=1))
    rows = forecast.forecast(one, window_s=FORECAST_WINDOW_S, horizon_s=HORIZON_S).collect()
    assert [(r["status"], r["samples"], r["forecast_lag"] == r["lag"]) for r in rows] == [
        ("UNKNOWN", 1, True)
    ] * 2
