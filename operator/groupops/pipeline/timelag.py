"""`timelag`: how many seconds each group is behind on each partition, and per member and group.

Method (the one kafka-lag-exporter uses): the snapshots of a partition's log end offset over time
form a table of (offset, time) points. The time lag of a group at time t with committed offset c
is t − τ(c), where τ(c) is the moment the log end offset was c, read from that table by linear
interpolation between the last point below c and the first point at or above c (the earliest,
where the log end stood still). Below the first point τ is extrapolated with the partition's
average produce rate from its first point to its last, in offset order: (last offset − first
offset) / (last time − first time), the first point being the earliest time of the lowest offset
and the last the latest time of the highest (its oldest and newest point when the log end only
grew, as the operator's table in planner/lagwindow.py keeps it). A group that is caught up
(c ≥ log end) has 0. On a linear series log_end = a + r·t this gives exactly lag / r.

In Spark this is an as-of lookup without a range join: history points and queries go into one
stream per (cluster, topic, partition) ordered by (offset, kind, t); the previous history point
comes from a running `last(..., ignorenulls)` and the next from `lead(..., 1) IGNORE NULLS`, both
over that one ordering, so the stream is shuffled once, sorted once and passed through one
Window operator. A query with no point before it has the first point after it, so only the last
point is a partition-wide frame (of the same ordering; docs/design.md §10). A query's own
point is null, so "the next non-null point after the query" is "the first history point at or
after it": the same row that a running `last` over the reverse order finds, which an earlier
version did at the cost of a second sort (docs/design.md §10). Groups reading the same topic
share its history. Caught-up rows (committed at the log end: most rows of a healthy cluster) are
0 s behind without a lookup and never enter the stream.

Outputs: `timelag(snapshots)` one row per snapshot row: cluster, group, topic, partition, member,
ts, lag, time_lag_s; `timelag_by_member(per_partition)` at each group's latest snapshot: per
member (and "" for unowned partitions) the partition count, summed lag and the largest time lag;
`timelag_by_group` the same per group.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from groupops.pipeline.frames import GROUP_KEYS, TOPIC_PARTITION_KEYS, at_newest, with_seconds_and_lag

__all__ = [
    "LOOKUP_ORDER",
    "lookup_stream",
    "timelag",
    "timelag_by_group",
    "timelag_by_member",
    "with_consumed",
]

_HISTORY, _QUERY = 1, 0
# A history point's offset and time, null on queries (and on a history row missing either): two
# plain columns rather than one struct, which every row of the stream would build and copy.
_POINT_OFFSET, _POINT_T = "point_offset", "point_t"


LOOKUP_ORDER = ("offset", "kind", "t")
"""The stream's order within each (cluster, topic, partition): what its one sort sorts by."""


def with_consumed(snapshots: DataFrame) -> DataFrame:
    """Snapshot rows with `t`, `lag` and `consumed` (the committed offset, else the log start)."""
    return with_seconds_and_lag(snapshots).withColumn(
        "consumed", sf.coalesce(sf.col("committed"), sf.col("log_start"))
    )


def _caught_up() -> Column:
    """A row committed at its log end: 0 s behind without a lookup."""
    return sf.col("consumed") >= sf.col("log_end")


def lookup_stream(rows: DataFrame) -> DataFrame:
    """The history points and the rows to look up (not caught up) of `with_consumed` rows as one
    stream: the rows the Window operator gets, before their shuffle and sort (exposed for
    benchmarks/pipeline_stages.py, which times that shuffle and sort alone)."""
    history = rows.select(
        *TOPIC_PARTITION_KEYS,
        sf.col("log_end").alias("offset"),
        "t",
        sf.lit(_HISTORY).alias("kind"),
        sf.lit(None).cast("string").alias("group"),
        sf.lit(None).cast("string").alias("member"),
        sf.lit(None).cast("long").alias("lag"),
    )
    # A caught-up row is 0 s behind without a lookup: it stays out of the stream (most rows of a
    # healthy cluster), and comes back, unshuffled, in the union at the end (`timelag`).
    queries = rows.where(~_caught_up() | _caught_up().isNull()).select(
        *TOPIC_PARTITION_KEYS,
        sf.col("consumed").alias("offset"),
        "t",
        sf.lit(_QUERY).alias("kind"),
        "group",
        "member",
        "lag",
    )
    is_point = (sf.col("kind") == _HISTORY) & sf.col("offset").isNotNull() & sf.col("t").isNotNull()
    return history.unionByName(queries).select(
        "*",
        sf.when(is_point, sf.col("offset")).alias(_POINT_OFFSET),
        sf.when(is_point, sf.col("t")).alias(_POINT_T),
    )


def timelag(snapshots: DataFrame) -> DataFrame:
    """Seconds behind for every snapshot row (see the module docstring)."""
    rows = with_consumed(snapshots)
    stream = lookup_stream(rows)
    ascending = Window.partitionBy(*TOPIC_PARTITION_KEYS).orderBy(*LOOKUP_ORDER)
    # The last point is a frame of every row of the same ordering rather than an unordered window:
    # Spark evaluates all of them in one Window operator, which buffers each partition's stream
    # once; two window specifications made two operators, two passes.
    whole = ascending.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    preceding = ascending.rowsBetween(Window.unboundedPreceding, -1)
    located = stream.select(
        "*",
        sf.last(_POINT_OFFSET, ignorenulls=True).over(preceding).alias("before_offset"),
        sf.last(_POINT_T, ignorenulls=True).over(preceding).alias("before_t"),
        # PySpark's `lead` has no ignoreNulls argument; the SQL form has (Spark ≥ 3.2). Both
        # columns are null on the same rows, so each skips to the same point.
        sf.expr(f"lead({_POINT_OFFSET}, 1) IGNORE NULLS").over(ascending).alias("after_offset"),
        sf.expr(f"lead({_POINT_T}, 1) IGNORE NULLS").over(ascending).alias("after_t"),
        sf.last(_POINT_OFFSET, ignorenulls=True).over(whole).alias("last_offset"),
        sf.last(_POINT_T, ignorenulls=True).over(whole).alias("last_t"),
    ).where(sf.col("kind") == _QUERY)

    b_offset, b_t = sf.col("before_offset"), sf.col("before_t")
    a_offset, a_t = sf.col("after_offset"), sf.col("after_t")
    # Used only where no point comes before the query: its next point is then the first point.
    span_from_first = sf.col("last_t") - a_t
    average_rate = sf.when(span_from_first > 0, (sf.col("last_offset") - a_offset) / span_from_first)
    interpolated = b_t + (sf.col("offset") - b_offset) * (a_t - b_t) / (a_offset - b_offset)
    extrapolated = a_t - (a_offset - sf.col("offset")) / average_rate
    produced_at = (
        sf.when(a_offset.isNull(), sf.lit(None))
        .when(a_offset == sf.col("offset"), a_t)
        .when(b_offset.isNull(), sf.when(average_rate > 0, extrapolated))
        .otherwise(interpolated)
    )
    time_lag = sf.greatest(sf.lit(0.0), sf.col("t") - produced_at).cast("double")
    ts = sf.timestamp_seconds("t").alias("ts")
    output = ("cluster", "group", "topic", "partition", "member", ts, "lag")
    return located.select(*output, time_lag.alias("time_lag_s")).unionByName(
        rows.where(_caught_up()).select(*output, sf.lit(0.0).alias("time_lag_s"))
    )


def _latest(per_partition: DataFrame) -> DataFrame:
    return at_newest(per_partition, time_column="ts")


def timelag_by_member(per_partition: DataFrame) -> DataFrame:
    """At each group's latest snapshot: per member, partitions, lag and the largest time lag."""
    return (
        _latest(per_partition)
        .withColumn("member", sf.coalesce(sf.col("member"), sf.lit("")))
        .groupBy(*GROUP_KEYS, "member")
        .agg(
            sf.max("ts").alias("ts"),
            sf.count(sf.lit(1)).alias("partitions"),
            sf.sum("lag").alias("lag"),
            sf.max("time_lag_s").alias("max_time_lag_s"),
        )
    )


def timelag_by_group(per_partition: DataFrame) -> DataFrame:
    """At each group's latest snapshot: partitions, total lag, largest and mean time lag."""
    return (
        _latest(per_partition)
        .groupBy(*GROUP_KEYS)
        .agg(
            sf.max("ts").alias("ts"),
            sf.count(sf.lit(1)).alias("partitions"),
            sf.sum("lag").alias("lag"),
            sf.max("time_lag_s").alias("max_time_lag_s"),
            sf.avg("time_lag_s").alias("mean_time_lag_s"),
        )
        .orderBy(*GROUP_KEYS)
    )
