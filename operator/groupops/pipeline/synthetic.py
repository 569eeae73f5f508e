"""Synthetic offset histories with known answers, for the tests, the benchmarks and the demo.

`history(spark, spec)` builds groups × partitions × steps snapshot rows inside Spark (no file,
no driver memory). Every partition p of group g is linear in time t (seconds since the start):

    log_end(t)   = E0 + r·t            r  = 3 + p mod 5 messages/s, E0 = 1,000,000 + 1,000·p
    committed(t) = C0 + s·t            C0 = E0 − (50,000 + 100·p)

with s chosen by kind = (31·g + p) mod 10: 0 caught up (committed = log_end, lag 0), 1-3 draining
(s = r + 1), 4-5 steady (s = r), 6-9 falling behind (s = r − 1). Planted partitions (falling
behind otherwise): STALL stops committing at `stuck_from_s` and keeps its owner; STOP stops too
and loses its owner (member ""); REWIND goes back `rewind_by` offsets at `rewind_at_s`.

Known answers: produce rate r; consume rate from `committed_column`; time lag = lag / r;
forecast = lag + (r − s)·H (s = 0 once stuck); statuses in `expected_status`.

`skewed_history(spark, ...)` is the backtest scenario: Zipf-distributed lag over the partitions
of one topic per group, members owning contiguous ranges, so `range` puts the heaviest partitions
together.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

__all__ = [
    "HistorySpec",
    "committed_column",
    "expected_status",
    "history",
    "partition_params",
    "skewed_history",
]

JAN_1_2026 = 1_767_225_600


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySpec:
    """Shape of a synthetic history; rows = groups × partitions × steps."""

    groups: int = 20
    partitions: int = 50
    steps: int = 1000
    step_s: int = 10
    members: int = 5
    start: int = JAN_1_2026
    cluster: str = "synthetic"
    stall: tuple[tuple[int, int], ...] = ((1, 7), (3, 12))
    stop: tuple[tuple[int, int], ...] = ((2, 3),)
    rewind: tuple[tuple[int, int], ...] = ((4, 20),)
    stuck_window_s: int = 600
    rewind_window_s: int = 120
    rewind_by: int = 500

    @property
    def rows(self) -> int:
        return self.groups * self.partitions * self.steps

    @property
    def last_t(self) -> int:
        return (self.steps - 1) * self.step_s

    @property
    def stuck_from_s(self) -> int:
        """When STALL/STOP partitions stop committing: a multiple of 60 s, 2 windows before the end."""
        return max(0, (self.last_t - 2 * self.stuck_window_s) // 60 * 60)

    @property
    def rewind_at_s(self) -> int:
        return max(self.step_s, self.last_t - self.rewind_window_s)

    def group_name(self, g: int) -> str:
        return f"g{g:04d}"

    def topic_name(self, g: int) -> str:
        return f"t{g:04d}"


def _planted(spec: HistorySpec, cells: tuple[tuple[int, int], ...], g: Column, p: Column) -> Column:
    codes = [gi * spec.partitions + pi for gi, pi in cells if gi < spec.groups and pi < spec.partitions]
    return (g * spec.partitions + p).isin(codes) if codes else sf.lit(False)


def committed_column(spec: HistorySpec, g: Column, p: Column, t: Column) -> Column:
    """committed(t) of partition p of group g, t in seconds since the start (see the docstring)."""
    r = sf.lit(3) + p % 5
    end0 = sf.lit(1_000_000) + sf.lit(1000) * p
    start0 = end0 - (sf.lit(50_000) + sf.lit(100) * p)
    kind = (sf.lit(31) * g + p) % 10
    stuck = _planted(spec, spec.stall, g, p) | _planted(spec, spec.stop, g, p)
    rewound = _planted(spec, spec.rewind, g, p)
    planted = stuck | rewound
    speed = (
        sf.when(planted, r - 1).when(kind == 0, r).when(kind <= 3, r + 1).when(kind <= 5, r).otherwise(r - 1)
    )
    moving_t = sf.when(stuck, sf.least(t, sf.lit(spec.stuck_from_s))).otherwise(t)
    base = sf.when(~planted & (kind == 0), end0 + r * t).otherwise(start0 + speed * moving_t)
    back = sf.when(rewound & (t >= sf.lit(spec.rewind_at_s)), sf.lit(spec.rewind_by)).otherwise(sf.lit(0))
    return (base - back).cast("long")


def history(spark: SparkSession, spec: HistorySpec) -> DataFrame:
    """The snapshot rows (schema: groupops.pipeline.schema.spark_schema)."""
    per_group = spec.partitions * spec.steps
    ids = spark.range(spec.rows)
    g = (sf.col("id") / per_group).cast("int")
    p = ((sf.col("id") / spec.steps).cast("long") % spec.partitions).cast("int")
    i = (sf.col("id") % spec.steps).cast("long")
    frame = ids.select(g.alias("g"), p.alias("p"), (i * spec.step_s).alias("t"))
    g_col, p_col, t_col = sf.col("g"), sf.col("p"), sf.col("t")
    stopped = _planted(spec, spec.stop, g_col, p_col) & (t_col >= sf.lit(spec.stuck_from_s))
    member = sf.when(stopped, sf.lit("")).otherwise(
        sf.concat(sf.lit("m"), (p_col % spec.members).cast("string"))
    )
    return frame.select(
        sf.timestamp_seconds(sf.lit(spec.start) + t_col).alias("ts"),
        sf.lit(spec.cluster).alias("cluster"),
        sf.format_string("g%04d", g_col).alias("group"),
        sf.format_string("t%04d", g_col).alias("topic"),
        p_col.alias("partition"),
        sf.lit(0).cast("long").alias("log_start"),
        (sf.lit(1_000_000) + sf.lit(1000) * p_col + (sf.lit(3) + p_col % 5) * t_col)
        .cast("long")
        .alias("log_end"),
        committed_column(spec, g_col, p_col, t_col).alias("committed"),
        member.alias("member"),
    )


def expected_status(spec: HistorySpec, g: int, p: int) -> str:
    """Burrow status the forecast job must give partition p of group g."""
    if (g, p) in spec.stall:
        return "STALL"
    if (g, p) in spec.stop:
        return "STOP"
    if (g, p) in spec.rewind:
        return "REWIND"
    kind = (31 * g + p) % 10
    return "OK" if kind <= 3 else "WARN"


def partition_params(spec: HistorySpec) -> list[tuple[str, str, int, int, int, int, str]]:
    """(group, topic, partition, g, r, s_now, expected status) per partition; s_now is the
    consume speed at the end of the history (0 when stuck)."""
    out = []
    for g in range(spec.groups):
        for p in range(spec.partitions):
            r = 3 + p % 5
            kind = (31 * g + p) % 10
            if (g, p) in spec.stall or (g, p) in spec.stop:
                s = 0
            elif (g, p) in spec.rewind or kind >= 6:
                s = r - 1
            elif kind == 0 or kind >= 4:
                s = r
            else:
                s = r + 1
            out.append((spec.group_name(g), spec.topic_name(g), p, g, r, s, expected_status(spec, g, p)))
    return out


def skewed_history(
    spark: SparkSession,
    *,
    groups: int = 4,
    partitions: int = 24,
    members: int = 4,
    steps: int = 12,
    step_s: int = 60,
    zipf_s: float = 1.2,
    cluster: str = "skewed",
) -> DataFrame:
    """Zipf-skewed lag: partition p of group g has lag ≈ 100,000 / (rank + 1)^zipf_s where the
    rank rotates with g, growing 2 % a step; members own contiguous ranges (as `range` gives)."""
    per_group = partitions * steps
    ids = spark.range(groups * per_group)
    g = (sf.col("id") / per_group).cast("int")
    p = ((sf.col("id") / steps).cast("long") % partitions).cast("int")
    i = (sf.col("id") % steps).cast("long")
    frame = ids.select(g.alias("g"), p.alias("p"), i.alias("i"))
    rank = (sf.col("p") + sf.col("g")) % partitions
    lag = (
        sf.lit(100_000.0) / sf.pow(rank + 1, sf.lit(zipf_s)) * (sf.lit(1.0) + sf.lit(0.02) * sf.col("i"))
    ).cast("long")
    per_member = (partitions + members - 1) // members
    end = sf.lit(10_000_000) + sf.col("i") * 1000
    return frame.select(
        sf.timestamp_seconds(sf.lit(JAN_1_2026) + sf.col("i") * step_s).alias("ts"),
        sf.lit(cluster).alias("cluster"),
        sf.format_string("skew%02d", sf.col("g")).alias("group"),
        sf.lit("events").alias("topic"),
        sf.col("p").alias("partition"),
        sf.lit(0).cast("long").alias("log_start"),
        end.cast("long").alias("log_end"),
        (end - lag).cast("long").alias("committed"),
        sf.concat(sf.lit("c"), (sf.col("p") / per_member).cast("int").cast("string")).alias("member"),
    )
