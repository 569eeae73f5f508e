"""Column helpers every transform shares: keys, seconds, lag.

Transforms take and return DataFrames; nothing here touches a session or a file.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

__all__ = [
    "GROUP_KEYS",
    "PARTITION_KEYS",
    "TOPIC_PARTITION_KEYS",
    "lag_column",
    "seconds",
    "with_seconds_and_lag",
]

GROUP_KEYS = ("cluster", "group")
PARTITION_KEYS = ("cluster", "group", "topic", "partition")
TOPIC_PARTITION_KEYS = ("cluster", "topic", "partition")


def seconds(ts: Column) -> Column:
    """A timestamp as fractional seconds since the epoch (double)."""
    return sf.unix_micros(ts) / sf.lit(1_000_000.0)


def lag_column() -> Column:
    """Lag per docs/design.md §4: end − committed, never negative; never committed: end − log start (the
    `earliest` reset, the `kafka` source's default)."""
    consumed_up_to = sf.coalesce(sf.col("committed"), sf.col("log_start"))
    return sf.greatest(sf.lit(0).cast("long"), sf.col("log_end") - consumed_up_to)


def with_seconds_and_lag(snapshots: DataFrame) -> DataFrame:
    """Adds `t` (seconds) and `lag` to snapshot rows."""
    return snapshots.withColumn("t", seconds(sf.col("ts"))).withColumn("lag", lag_column())
