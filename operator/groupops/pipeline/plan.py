"""`plan`: a partition plan for every group at once, by the same engine as `groupops assign`.

Input: one row per (cluster, group, topic, partition) with `lag` and `member` (the owner now, ""
for none), from `latest_lag(snapshots)` (current lag) or from the `forecast` job's output
(`forecast_lag` as lag). Each group becomes one `groupops assign` document (`group_document`):
its topics with partition counts (highest partition seen + 1), its members (the distinct owners;
each subscribes to all of the group's topics and owns what it owns now), its lags. A grouped
pandas UDF (`applyInPandas`, one call per group) parses the document with `parse_group` and runs
`get_strategy(strategy)`, so the plan is the CLI's plan to the partition.

Members that own nothing at snapshot time are not visible in offset snapshots, so they get no
partitions here; a group with no owner at all gets one row with `error` set.

Output (`PLAN_SCHEMA`), one row per member: cluster, group, strategy, member, partitions
(array of {topic, partition}, sorted), member_lag, and the group's max_member_lag, lower_bound,
imbalance, moves (from the current owners) as computed by groupops.assign.stats.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as sf

from groupops.assign import get_strategy
from groupops.assign.stats import compute_stats
from groupops.contract import parse_group
from groupops.pipeline.frames import PARTITION_KEYS, with_seconds_and_lag

__all__ = ["PLAN_SCHEMA", "group_document", "latest_lag", "plan", "plan_group"]

PLAN_SCHEMA = (
    "cluster string, group string, strategy string, member string, "
    "partitions array<struct<topic:string,partition:int>>, member_lag long, "
    "max_member_lag double, lower_bound double, imbalance double, moves int, error string"
)


def latest_lag(snapshots: DataFrame) -> DataFrame:
    """Each partition's lag and owner at its group's newest snapshot."""
    rows = with_seconds_and_lag(snapshots)
    newest = sf.max("t").over(Window.partitionBy("cluster", "group"))
    return (
        rows.withColumn("newest", newest)
        .where(sf.col("t") == sf.col("newest"))
        .select(*PARTITION_KEYS, "lag", sf.coalesce(sf.col("member"), sf.lit("")).alias("member"))
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


def plan(lags: DataFrame, *, strategy: str) -> DataFrame:
    """Plans for every (cluster, group) in `lags` (columns: PARTITION_KEYS, lag, member)."""
    get_strategy(strategy)  # an unknown name fails here, on the driver, not in every task

    def per_group(key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
        return _plan_rows(strategy, key, frame)

    return (
        lags.select(*PARTITION_KEYS, "lag", "member")
        .groupBy("cluster", "group")
        .applyInPandas(per_group, PLAN_SCHEMA)
    )
