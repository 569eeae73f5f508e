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
from groupops.pipeline.frames import GROUP_KEYS, PARTITION_KEYS, with_seconds_and_lag

__all__ = ["STATUSES", "forecast"]

STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND", "UNKNOWN")


def forecast(snapshots: DataFrame, *, window_s: float, horizon_s: float) -> DataFrame:
    """Lag forecast and status per partition (see the module docstring)."""
    if window_s <= 0 or horizon_s < 0:
        raise ValueError(f"window must be positive and horizon not negative, not {window_s} / {horizon_s}")
    rows = with_seconds_and_lag(snapshots).withColumn(
        "consumed", sf.coalesce(sf.col("committed"), sf.col("log_start"))
    )
    newest = sf.max("t").over(Window.partitionBy(*GROUP_KEYS))
    recent = rows.withColumn("now_t", newest).where(sf.col("t") >= sf.col("now_t") - sf.lit(float(window_s)))
    sample = sf.struct("t", "consumed", "lag", "log_end", "member")
    per_partition = recent.groupBy(*PARTITION_KEYS).agg(
        sf.array_sort(sf.collect_list(sample)).alias("samples"),
        sf.max("now_t").alias("now_t"),
    )
    n = sf.size("samples")
    first, last = sf.col("samples")[0], sf.element_at("samples", -1)
    span = last["t"] - first["t"]
    per_second = sf.when(span > 0, sf.lit(1.0) / span)
    produce_rate = (last["log_end"] - first["log_end"]) * per_second
    consume_rate = (last["consumed"] - first["consumed"]) * per_second
    # Indexes 1..n-1 of the pairs (i-1, i); empty for one sample (sequence(1, 0) would count down).
    steps = sf.when(n >= 2, sf.sequence(sf.lit(1), n - 1)).otherwise(sf.array().cast("array<int>"))
    rewound = sf.exists(
        steps, lambda i: sf.col("samples")[i]["consumed"] < sf.col("samples")[i - 1]["consumed"]
    )
    lag_never_fell = sf.forall(
        steps, lambda i: sf.col("samples")[i]["lag"] >= sf.col("samples")[i - 1]["lag"]
    )
    caught_up = sf.exists("samples", lambda s: s["lag"] == 0)
    stood_still = sf.forall("samples", lambda s: s["consumed"] == first["consumed"])
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
