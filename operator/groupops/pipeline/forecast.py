"""`forecast`: each partition's lag at a horizon, and Burrow's status over a window.

For each (cluster, group, topic, partition) the window is the last `window_s` seconds before the
group's newest snapshot. From the window's first and last samples:

    produce_rate, consume_rate   as in `rates`, over the whole window
    forecast_lag = max(0, lag_now + (produce_rate − consume_rate) · horizon_s)

(on a linear series this is the exact lag at now + horizon). The status follows Burrow's
evaluation rules, in Burrow's order, adapted to snapshots:

1. OK      some sample in the window has lag 0 (the group caught up at least once);
2. REWIND  the committed offset went down between two consecutive samples;
3. STOP    the committed offset did not move in the window, lag > 0, and no member owns the
           partition now (member ""): nobody is consuming it;
4. STALL   the committed offset did not move in the window and lag > 0, while a member owns it
           (or membership was not captured): the consumer is stuck;
5. WARN    the committed offset moved but the lag never went down between two samples;
6. OK      otherwise (the lag is falling). UNKNOWN when the window has fewer than 2 samples.

Burrow tells STOP from STALL by commit timestamps, which offset snapshots do not carry; the owner
recorded with each snapshot is the signal used here instead.

Output columns: groupops.lag.forecast.FORECAST_COLUMNS (the `forecast` lag source reads them).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as sf

from groupops.lag.forecast import FORECAST_COLUMNS
from groupops.pipeline.frames import PARTITION_KEYS, recent, with_seconds_and_lag

__all__ = ["SAMPLE_ORDER", "STATUSES", "STREAM_KEY", "forecast", "window_rows"]

STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND", "UNKNOWN")
STREAM_KEY = "partition_hash"  # xxhash64 of PARTITION_KEYS: the sort's leading key


SAMPLE_ORDER = ("t", "consumed", "lag", "log_end", "member")
"""A partition's samples in time order (ties broken by the rest: the order is total)."""


def window_rows(snapshots: DataFrame, *, window_s: float) -> DataFrame:
    """The samples of each group's last `window_s` seconds, with `consumed` and the stream key
    `partition_hash`: the rows the Window operator gets, before their shuffle and sort (exposed
    for benchmarks/pipeline_stages.py, which times that shuffle and sort alone)."""
    rows = with_seconds_and_lag(snapshots).select(
        *PARTITION_KEYS,
        "t",
        sf.coalesce(sf.col("committed"), sf.col("log_start")).alias("consumed"),
        "lag",
        "log_end",
        "member",
    )
    recent_rows = recent(rows, time_column="t", span_s=window_s).drop("newest_t")
    return recent_rows.withColumn(STREAM_KEY, sf.xxhash64(*PARTITION_KEYS))


def forecast(snapshots: DataFrame, *, window_s: float, horizon_s: float) -> DataFrame:
    """Lag forecast and status per partition (see the module docstring)."""
    if window_s <= 0 or horizon_s < 0:
        raise ValueError(f"window must be positive and horizon not negative, not {window_s} / {horizon_s}")
    # The window's rows only, dropped where they are read (an aggregate of each group's newest
    # time joined back), then one shuffle and one sort per partition in sample order.
    sample = sf.struct(*SAMPLE_ORDER)
    stream = window_rows(snapshots, window_s=window_s)
    in_order = Window.partitionBy(STREAM_KEY, *PARTITION_KEYS).orderBy(*SAMPLE_ORDER)
    # Consecutive samples (i-1, i) in the order of the samples sorted as structs: `lag` (the
    # window function) gives sample i-1 on row i, null on the first row, so a pair with a null
    # side is neither a rewind nor a fall, as in the array form this replaces.
    paired = stream.select(
        *PARTITION_KEYS,
        STREAM_KEY,
        sample.alias("sample"),
        (sf.col("consumed") < sf.lag("consumed").over(in_order)).alias("went_back"),
        (sf.col("lag") < sf.lag("lag").over(in_order)).alias("fell"),
        "consumed",
        "lag",
    )
    # Grouped by the same leading keys the window sorted by, so the aggregate reuses that order.
    per_partition = paired.groupBy(STREAM_KEY, *PARTITION_KEYS).agg(
        sf.count(sf.lit(1)).cast("int").alias("n"),
        sf.min("sample").alias("first"),
        sf.max("sample").alias("last"),
        sf.bool_or("went_back").alias("rewound"),
        sf.bool_or("fell").alias("fell"),
        sf.bool_or(sf.col("lag") == 0).alias("caught_up"),
        # Every sample's committed offset equals the first's: all known and min = max.
        ((sf.count("consumed") == sf.count(sf.lit(1))) & (sf.min("consumed") == sf.max("consumed"))).alias(
            "stood_still"
        ),
    )
    n = sf.col("n")
    first, last = sf.col("first"), sf.col("last")
    span = last["t"] - first["t"]
    per_second = sf.when(span > 0, sf.lit(1.0) / span)
    produce_rate = (last["log_end"] - first["log_end"]) * per_second
    consume_rate = (last["consumed"] - first["consumed"]) * per_second
    rewound = sf.col("rewound")
    lag_never_fell = ~sf.coalesce(sf.col("fell"), sf.lit(False))
    caught_up = sf.col("caught_up")
    stood_still = sf.col("stood_still")
    unowned = last["member"] == sf.lit("")
    status = (
        sf.when(n < 2, "UNKNOWN")
        .when(caught_up, "OK")
        .when(rewound, "REWIND")
        .when(stood_still & unowned, "STOP")
        .when(stood_still, "STALL")
        .when(lag_never_fell, "WARN")
        .otherwise("OK")
    )
    forecast_lag = sf.greatest(
        sf.lit(0.0), last["lag"] + (produce_rate - consume_rate) * sf.lit(float(horizon_s))
    )
    result = per_partition.select(
        *PARTITION_KEYS,
        sf.timestamp_seconds(last["t"]).alias("ts"),
        last["member"].alias("member"),
        last["lag"].alias("lag"),
        produce_rate.alias("produce_rate"),
        consume_rate.alias("consume_rate"),
        sf.lit(float(horizon_s)).alias("horizon_s"),
        sf.lit(float(window_s)).alias("window_s"),
        sf.when(n >= 2, sf.round(forecast_lag).cast("long")).otherwise(last["lag"]).alias("forecast_lag"),
        status.alias("status"),
        n.alias("samples"),
    )
    return result.select(*FORECAST_COLUMNS)
