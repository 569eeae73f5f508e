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
    "at_newest",
    "lag_column",
    "recent",
    "seconds",
    "with_seconds_and_lag",
]

GROUP_KEYS = ("cluster", "group")
PARTITION_KEYS = ("cluster", "group", "topic", "partition")
TOPIC_PARTITION_KEYS = ("cluster", "topic", "partition")
_KEY_HASH = "__key_hash"  # xxhash64 of `recent`'s keys: its join's key


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


def at_newest(frame: DataFrame, *, time_column: str, keys: tuple[str, ...] = GROUP_KEYS) -> DataFrame:
    """The rows of `frame` whose `time_column` equals the largest in their `keys` (every such row,
    ties included; null keys form a group of their own, as in a window partitioned by `keys`).

    An aggregate joined back rather than `max(...).over(partitionBy(keys))`: the aggregate shuffles
    one partial maximum per key and task instead of every row, and it is broadcast, so the rows
    themselves are not shuffled (see `recent`).
    """
    return recent(frame, time_column=time_column, span_s=None, keys=keys)


def recent(
    frame: DataFrame, *, time_column: str, span_s: float | None, keys: tuple[str, ...] = GROUP_KEYS
) -> DataFrame:
    """The rows of `frame` at most `span_s` before the largest `time_column` in their `keys` (None:
    only the rows at the largest, as `at_newest`), with that largest as `newest_<time_column>`
    when `span_s` is given. Null keys form a group of their own; a null time is never kept.

    The same aggregate joined back as `at_newest`, with the window as the join condition: rows
    outside it are dropped where they are read, before any shuffle, so a job over a long history
    shuffles only its window. The maxima are broadcast by a hint (about 100 bytes per group): left
    to adaptive execution, the first plan is a sort-merge join (the aggregate's size is estimated
    from the files') whose shuffle of every row runs before the broadcast is chosen
    (docs/design.md §10). The join's key is one long, the xxhash64 of `keys`, so the broadcast is
    a hashed relation of longs; the keys' null-safe equality is part of the condition, so a hash
    shared by two groups costs a failed condition, never a wrong row.
    """
    keyed = frame.withColumn(_KEY_HASH, sf.xxhash64(*keys))
    newest = sf.broadcast(keyed.groupBy(_KEY_HASH, *keys).agg(sf.max(time_column).alias("__newest")))
    rows, maxima = keyed.alias("__rows"), newest.alias("__maxima")
    same_key = [
        sf.col(f"__rows.{_KEY_HASH}") == sf.col(f"__maxima.{_KEY_HASH}"),
        *(_same_or_both_null(sf.col(f"__rows.{k}"), sf.col(f"__maxima.{k}")) for k in keys),
    ]
    if span_s is None:
        in_span = sf.col(f"__rows.{time_column}") == sf.col("__maxima.__newest")
        return rows.join(maxima, [*same_key, in_span]).select("__rows.*").drop(_KEY_HASH)
    in_span = sf.col(f"__rows.{time_column}") >= sf.col("__maxima.__newest") - sf.lit(float(span_s))
    return (
        rows.join(maxima, [*same_key, in_span])
        .select("__rows.*", sf.col("__maxima.__newest").alias(f"newest_{time_column}"))
        .drop(_KEY_HASH)
    )


def _same_or_both_null(left: Column, right: Column) -> Column:
    """`left <=> right` written so that the join keeps it as a condition: Spark makes a null-safe
    equality a join key, and the hashed relation would then be keyed by strings."""
    return sf.coalesce(left == right, left.isNull() & right.isNull())
