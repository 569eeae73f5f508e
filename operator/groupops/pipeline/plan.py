"""`plan`: a partition plan for every group at once, by the same engine as `groupops assign`.

Input: one row per (cluster, group, topic, partition) with `lag` and `member` (the owner now, ""
for none), from `latest_lag(snapshots)` (current lag) or from the `forecast` job's output
(`forecast_lag` as lag). Each group becomes one `groupops assign` document (`group_document`):
its topics with partition counts (highest partition seen + 1), its members (the distinct owners;
each subscribes to all of the group's topics and owns what it owns now), its lags. Each document
is parsed with `parse_group` and assigned by `get_strategy(strategy)`, so the plan is the CLI's
plan to the partition.

Many groups per Python call: the rows are hash-partitioned by (cluster, group) and sorted by it
within each partition, and `mapInPandas` hands a Python worker one Arrow batch (up to
`spark.sql.execution.arrow.maxRecordsPerBatch` rows) at a time; `plan_batches` cuts each batch
into groups and plans them one by one. A group that runs past the end of a batch is held back and
completed with the next batch, so every group is planned once, from all its rows, and a worker
holds at most one batch plus one group. (`applyInPandas` per group, the earlier form, paid one
Arrow round trip and one pandas frame per group: most of the job's time on small groups.)

Members that own nothing at snapshot time are not visible in offset snapshots, so they get no
partitions here; a group with no owner at all gets one row with `error` set.

Output (`PLAN_SCHEMA`), one row per member: cluster, group, strategy, member, partitions
(array of {topic, partition}, sorted), member_lag, and the group's max_member_lag, lower_bound,
imbalance, moves (from the current owners) as computed by groupops.assign.stats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from groupops.assign import get_strategy
from groupops.assign.stats import compute_stats
from groupops.contract import parse_group
from groupops.pipeline.frames import PARTITION_KEYS, at_newest, with_seconds_and_lag

__all__ = [
    "PLAN_SCHEMA",
    "by_group_in_batches",
    "group_document",
    "group_key",
    "latest_lag",
    "plan",
    "plan_batches",
    "plan_group",
    "whole_groups",
]

PLAN_SCHEMA = (
    "cluster string, group string, strategy string, member string, "
    "partitions array<struct<topic:string,partition:int>>, member_lag long, "
    "max_member_lag double, lower_bound double, imbalance double, moves int, error string"
)


def latest_lag(snapshots: DataFrame) -> DataFrame:
    """Each partition's lag and owner at its group's newest snapshot."""
    return at_newest(with_seconds_and_lag(snapshots), time_column="t").select(
        *PARTITION_KEYS, "lag", sf.coalesce(sf.col("member"), sf.lit("")).alias("member")
    )


def group_document(strategy: str, rows: Iterable[tuple[str, int, int, str]]) -> dict[str, Any]:
    """The `groupops assign` document of one group from (topic, partition, lag, member) rows."""
    counts: dict[str, int] = {}
    lag_of: dict[tuple[str, int], int] = {}
    owned: dict[str, list[list[str | int]]] = {}
    for topic, partition, lag, member in rows:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
        lag_of[(topic, partition)] = max(0, lag)
        if member:
            owned.setdefault(member, []).append([topic, partition])
    topics = sorted(counts)
    members = [
        {"member_id": member, "topics": topics, "owned": sorted(owned[member])} for member in sorted(owned)
    ]
    lags = {topic: [lag_of.get((topic, p), 0) for p in range(counts[topic])] for topic in topics}
    return {"strategy": strategy, "topics": {t: counts[t] for t in topics}, "members": members, "lags": lags}


def plan_group(document: Mapping[str, Any]) -> tuple[dict[str, list[tuple[str, int]]], dict[str, Any]]:
    """Parse and assign one document: (assignment as member → sorted (topic, partition), stats)."""
    strategy, group = parse_group(document)
    assignment = get_strategy(strategy)(group)
    stats = compute_stats(group, assignment)
    return (
        {member: [(tp.topic, tp.partition) for tp in sorted(tps)] for member, tps in assignment.items()},
        dict(stats),
    )


_PLAN_COLUMNS = [name.split(" ")[0] for name in PLAN_SCHEMA.split(", ")]
_NO_OWNER = "no member owns any partition at the newest snapshot"


def _plan_row_lists(
    strategy: str, key: tuple[Any, ...], rows: Iterable[tuple[Any, Any, Any, Any]]
) -> list[list[Any]]:
    """PLAN_SCHEMA rows (as lists) of one group from its (topic, partition, lag, member) rows."""
    cluster, group = key
    document = group_document(strategy, ((str(t), int(p), int(lag), str(m or "")) for t, p, lag, m in rows))
    if not document["members"]:
        return [[cluster, group, strategy, None, [], 0, 0.0, 0.0, 1.0, 0, _NO_OWNER]]
    assignment, stats = plan_group(document)
    return [
        [
            cluster,
            group,
            strategy,
            member,
            [{"topic": topic, "partition": partition} for topic, partition in partitions],
            int(stats["members"][member]["lag"]),
            float(stats["max_member_lag"]),
            float(stats["lower_bound"]),
            float(stats["imbalance"]),
            int(stats["moves"]),
            None,
        ]
        for member, partitions in assignment.items()
    ]


def _plan_rows(strategy: str, key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
    """The plan of one group's lag rows, as a frame (what `plan_batches` gives for that group)."""
    rows = zip(
        frame["topic"],
        frame["partition"].astype(int),
        frame["lag"].astype("int64"),
        frame["member"],
        strict=True,
    )
    return pd.DataFrame(_plan_row_lists(strategy, key, rows), columns=_PLAN_COLUMNS)


def _null(value: Any) -> bool:
    """None, pandas' NA or NaN: what a null string becomes in pandas (`pd.isna` on one value,
    without its dispatch: this runs once per row)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def group_key(cluster: Any, group: Any) -> tuple[Any, Any]:
    """A group's key as a Python value: null (None or NaN from pandas) becomes None."""
    return (None if _null(cluster) else cluster, None if _null(group) else group)


def _plan_complete_groups(strategy: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Plan every group of `frame`, in the order of their first rows, into one frame.

    The columns become Python lists once per batch and the groups are cut from them by key: a
    pandas `groupby` and one small frame per group cost more than planning a group of 50
    partitions (most of the Python time, measured with cProfile)."""
    columns = (
        frame["topic"].tolist(),
        frame["partition"].astype("int64").tolist(),
        frame["lag"].astype("int64").tolist(),
        frame["member"].tolist(),
    )
    rows_of: dict[tuple[Any, Any], list[tuple[Any, Any, Any, Any]]] = {}
    keys = (group_key(c, g) for c, g in zip(frame["cluster"].tolist(), frame["group"].tolist(), strict=True))
    for key, row in zip(keys, zip(*columns, strict=True), strict=True):
        rows_of.setdefault(key, []).append(row)
    out = [row for key, rows in rows_of.items() for row in _plan_row_lists(strategy, key, rows)]
    return pd.DataFrame(out, columns=_PLAN_COLUMNS)


def whole_groups(batches: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Frames holding whole groups only, from batches of rows sorted by (cluster, group) in which
    a group may continue into the next batch: the last group of a batch is held back and joined
    to the next one, so a caller sees every group once, with all its rows, and holds at most one
    batch plus one group."""
    pending: pd.DataFrame | None = None  # the last group of the batches so far, maybe incomplete
    for batch in batches:
        if batch.empty:
            continue
        rows = batch if pending is None else pd.concat([pending, batch], ignore_index=True)
        clusters, groups = rows["cluster"].tolist(), rows["group"].tolist()
        last = group_key(clusters[-1], groups[-1])
        tail = len(clusters) - 1
        while tail > 0 and group_key(clusters[tail - 1], groups[tail - 1]) == last:
            tail -= 1
        pending = rows.iloc[tail:]
        if tail > 0:
            yield rows.iloc[:tail]
    if pending is not None:
        yield pending


def plan_batches(strategy: str, batches: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Plan rows (PLAN_SCHEMA) for batches of lag rows sorted by (cluster, group): every group's
    rows are together, though a group may continue into the next batch."""
    for frame in whole_groups(batches):
        yield _plan_complete_groups(strategy, frame)


def by_group_in_batches(frame: DataFrame) -> DataFrame:
    """`frame` hash-partitioned by (cluster, group) and sorted by it within each partition, for a
    `mapInPandas` that cuts its Arrow batches into groups (`whole_groups`).

    An explicit partition count (`spark.sql.shuffle.partitions`): the rows are few bytes but much
    CPU in Python, and adaptive execution, which sizes partitions by bytes, would coalesce them all
    into one task (one Python worker)."""
    tasks = int(frame.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    return frame.repartition(tasks, "cluster", "group").sortWithinPartitions("cluster", "group")


def plan(lags: DataFrame, *, strategy: str) -> DataFrame:
    """Plans for every (cluster, group) in `lags` (columns: PARTITION_KEYS, lag, member)."""
    get_strategy(strategy)  # an unknown name fails here, on the driver, not in every task

    def per_batch(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        return plan_batches(strategy, batches)

    return by_group_in_batches(lags.select(*PARTITION_KEYS, "lag", "member")).mapInPandas(
        per_batch, PLAN_SCHEMA
    )
