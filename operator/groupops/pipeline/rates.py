"""`rates`: produce and consume rate of every partition of every group, per time window.

Windows are tumbling, aligned to the epoch (`floor(t / window) * window`). Within a window the
rate is the change between its first and last sample over the time between them:

    produce_rate = (log_end[last] − log_end[first]) / (t[last] − t[first])      messages/s
    consume_rate = (committed[last] − committed[first]) / (t[last] − t[first])

A window with one sample has null rates. A rewind (committed going back) shows as a negative
consume rate; `forecast` flags it. Output, one row per (cluster, group, topic, partition, window):
window_start, window_end (timestamps), samples, first_ts, last_ts, produce_rate, consume_rate,
lag (at the last sample).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from groupops.pipeline.frames import PARTITION_KEYS, with_seconds_and_lag

__all__ = ["rates"]


def rates(snapshots: DataFrame, *, window_s: float) -> DataFrame:
    """Per-window produce and consume rates (see the module docstring)."""
    if window_s <= 0:
        raise ValueError(f"window must be positive, not {window_s}")
    rows = with_seconds_and_lag(snapshots).withColumn(
        "window_start_s", sf.floor(sf.col("t") / sf.lit(float(window_s))) * sf.lit(float(window_s))
    )
    committed = sf.coalesce(sf.col("committed"), sf.col("log_start"))
    windows = rows.groupBy(*PARTITION_KEYS, "window_start_s").agg(
        sf.count(sf.lit(1)).alias("samples"),
        sf.min("t").alias("first_t"),
        sf.max("t").alias("last_t"),
        sf.min_by("log_end", "t").alias("first_end"),
        sf.max_by("log_end", "t").alias("last_end"),
        sf.min_by(committed, "t").alias("first_committed"),
        sf.max_by(committed, "t").alias("last_committed"),
        sf.max_by("lag", "t").alias("lag"),
    )
    span = sf.col("last_t") - sf.col("first_t")
    per_second = sf.when(span > 0, sf.lit(1.0) / span)
    return windows.select(
        *PARTITION_KEYS,
        sf.timestamp_seconds("window_start_s").alias("window_start"),
        sf.timestamp_seconds(sf.col("window_start_s") + sf.lit(float(window_s))).alias("window_end"),
        "samples",
        sf.timestamp_seconds("first_t").alias("first_ts"),
        sf.timestamp_seconds("last_t").alias("last_ts"),
        ((sf.col("last_end") - sf.col("first_end")) * per_second).alias("produce_rate"),
        ((sf.col("last_committed") - sf.col("first_committed")) * per_second).alias("consume_rate"),
        "lag",
    )
