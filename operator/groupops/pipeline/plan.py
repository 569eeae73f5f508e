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

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from groupops.assign import get_strategy
from groupops.assign.stats import compute_stats
from groupops.contract import parse_group
from groupops.pipeline.frames import PARTITION_KEYS, at_newest, with_seconds_and_lag

__all__ = ["PLAN_SCHEMA", "group_document", "latest_lag", "plan", "plan_batches", "plan_group"]

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


def _plan_rows(strategy: str, key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
    cluster, group = key
    columns = [name.split(" ")[0] for name in PLAN_SCHEMA.split(", ")]
    rows = zip(
        frame["topic"],
        frame["partition"].astype(int),
        frame["lag"].astype("int64"),
        frame["member"],
        strict=True,
    )
    document = group_document(strategy, ((str(t), int(p), int(lag), str(m or "")) for t, p, lag, m in rows))
    if not document["members"]:
        error = "no member owns any partition at the newest snapshot"
        return pd.DataFrame(
            [[cluster, group, strategy, None, [], 0, 0.0, 0.0, 1.0, 0, error]], columns=columns
        )
    assignment, stats = plan_group(document)
    out = []
    for member, partitions in assignment.items():
        out.append(
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
        )
    return pd.DataFrame(out, columns=columns)


def _key(cluster: Any, group: Any) -> tuple[Any, Any]:
    """A group's key as a Python value: null (None or NaN from pandas) becomes None."""
    return (None if pd.isna(cluster) else cluster, None if pd.isna(group) else group)


def _plan_complete_groups(strategy: str, frame: pd.DataFrame) -> pd.DataFrame:
    parts = [
        _plan_rows(strategy, _key(cluster, group), part)
        for (cluster, group), part in frame.groupby(["cluster", "group"], sort=False, dropna=False)
    ]
    return pd.concat(parts, ignore_index=True)


def plan_batches(strategy: str, batches: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Plan rows (PLAN_SCHEMA) for batches of lag rows sorted by (cluster, group): every group's
    rows are together, though a group may continue into the next batch."""
    pending: pd.DataFrame | None = None  # the last group of the batches so far, maybe incomplete
    for batch in batches:
        if batch.empty:
            continue
        rows = batch if pending is None else pd.concat([pending, batch], ignore_index=True)
        keys = [_key(c, g) for c, g in zip(rows["cluster"], rows["group"], strict=True)]
        tail = len(keys) - 1
        while tail > 0 and keys[tail - 1] == keys[-1]:
            tail -= 1
        pending = rows.iloc[tail:]
        if tail > 0:
            yield _plan_complete_groups(strategy, rows.iloc[:tail])
    if pending is not None:
        yield _plan_complete_groups(strategy, pending)


def plan(lags: DataFrame, *, strategy: str) -> DataFrame:
    """Plans for every (cluster, group) in `lags` (columns: PARTITION_KEYS, lag, member)."""
    get_strategy(strategy)  # an unknown name fails here, on the driver, not in every task

    def per_batch(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        return plan_batches(strategy, batches)

    # An explicit partition count: the rows are few bytes but much CPU in Python, and adaptive
    # execution, which sizes partitions by bytes, would coalesce them all into one task.
    tasks = int(lags.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    return (
        lags.select(*PARTITION_KEYS, "lag", "member")
        .repartition(tasks, "cluster", "group")
        .sortWithinPartitions("cluster", "group")
        .mapInPandas(per_batch, PLAN_SCHEMA)
    )
