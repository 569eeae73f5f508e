"""`backtest`: replay each group's history under every strategy and score them.

Steps:
1. `replay_points(snapshots, step_s)`: cut history into steps of `step_s` seconds and keep each
   partition's last sample in each step (lag, committed, owner);
2. `backtest(points, strategies)`: each group's steps replayed in time order under each strategy,
   one replay per UTC date of the steps, many groups per pandas UDF call (the rows partitioned
   and sorted by group, cut into whole groups per Arrow batch as `plan` does:
   `plan.whole_groups`). At a date's first step the owners are the real ones; after that a
   strategy's members own what that strategy gave them one step earlier (so sticky strategies
   are judged on their stickiness), restricted to the members alive at the step. A date is
   replayed from its own steps only, so an incremental run can replay the new dates alone and
   give what a full run gives (docs/design.md §10). Each step is scored
   with groupops.assign.stats: max member lag, its lower bound, imbalance (max / bound) and moves;
   time to drain = max member lag / (the group's consume rate over the step / members): how long
   the most loaded member needs at the group's average per-member speed, new messages ignored.
   A strategy that raises NotImplementedError gets one row per date (at its first step) with
   `error` set and is not scored;
3. `summarize(steps)`: per group and strategy the mean and peak max member lag, mean imbalance,
   total moves, mean time to drain, and `rank` (1 = lowest mean max member lag in the group).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as sf

from groupops.assign import get_strategy
from groupops.pipeline.frames import PARTITION_KEYS, with_seconds_and_lag
from groupops.pipeline.plan import by_group_in_batches, group_document, group_key, plan_group, whole_groups

__all__ = ["BACKTEST_STRATEGIES", "REPLAY_SPAN_S", "STEP_SCHEMA", "backtest", "replay_points", "summarize"]

BACKTEST_STRATEGIES = ("range", "roundrobin", "sticky", "lag", "balanced")

REPLAY_SPAN_S = 86_400
"""One replay per UTC date: the unit an incremental run recomputes (the dates of `backtest_steps/`)."""

STEP_SCHEMA = (
    "cluster string, group string, strategy string, step_ts timestamp, members int, total_lag long, "
    "max_member_lag double, lower_bound double, imbalance double, moves int, drain_s double, error string"
)


def replay_points(snapshots: DataFrame, *, step_s: float) -> DataFrame:
    """Each partition's last sample in every step: PARTITION_KEYS, step_t, lag, consumed, member."""
    if step_s <= 0:
        raise ValueError(f"step must be positive, not {step_s}")
    rows = with_seconds_and_lag(snapshots).withColumn(
        "step_t", sf.floor(sf.col("t") / sf.lit(float(step_s))) * sf.lit(float(step_s))
    )
    return rows.groupBy(*PARTITION_KEYS, "step_t").agg(
        sf.max_by("lag", "t").alias("lag"),
        sf.max_by(sf.coalesce(sf.col("committed"), sf.col("log_start")), "t").alias("consumed"),
        sf.max_by(sf.coalesce(sf.col("member"), sf.lit("")), "t").alias("member"),
        sf.max("t").alias("t"),
    )


def _replay_strategy(
    strategy: str, cluster: str, group: str, steps: Sequence[tuple[float, pd.DataFrame]]
) -> list[list[Any]]:
    out: list[list[Any]] = []
    previous: dict[str, list[tuple[str, int]]] | None = None
    previous_consumed: tuple[float, int] | None = None
    for step_t, frame in steps:
        rows = list(
            zip(
                frame["topic"],
                frame["partition"].astype(int),
                frame["lag"].astype("int64"),
                frame["member"],
                strict=True,
            )
        )
        alive = sorted({str(m) for *_, m in rows if m})
        consumed = int(frame["consumed"].sum())
        t_last = float(frame["t"].max())
        rate = None
        if previous_consumed is not None and t_last > previous_consumed[0]:
            rate = (consumed - previous_consumed[1]) / (t_last - previous_consumed[0])
        previous_consumed = (t_last, consumed)
        if not alive:
            continue
        if previous is None:
            owner_rows = [(str(t), int(p), int(lag), str(m or "")) for t, p, lag, m in rows]
        else:
            owner_of = {tp: member for member, tps in previous.items() if member in alive for tp in tps}
            owner_rows = [
                (str(t), int(p), int(lag), owner_of.get((str(t), int(p)), "")) for t, p, lag, _ in rows
            ]
        document = group_document(strategy, owner_rows)
        present = {member["member_id"] for member in document["members"]}
        document["members"] += [
            {"member_id": m, "topics": sorted(document["topics"])} for m in alive if m not in present
        ]
        try:
            assignment, stats = plan_group(document)
        except NotImplementedError:
            at = pd.Timestamp(steps[0][0], unit="s", tz="UTC")  # the replay's first step
            return [[cluster, group, strategy, at, 0, 0, None, None, None, 0, None, "not implemented"]]
        previous = assignment
        per_member = rate / len(alive) if rate is not None and rate > 0 else None
        drain = stats["max_member_lag"] / per_member if per_member else None
        out.append(
            [
                cluster,
                group,
                strategy,
                pd.Timestamp(step_t, unit="s", tz="UTC"),
                len(alive),
                int(stats["total_lag"]),
                float(stats["max_member_lag"]),
                float(stats["lower_bound"]),
                float(stats["imbalance"]),
                int(stats["moves"]),
                drain,
                None,
            ]
        )
    return out


def backtest(points: DataFrame, *, strategies: Sequence[str] = BACKTEST_STRATEGIES) -> DataFrame:
    """Scores per (cluster, group, strategy, step): STEP_SCHEMA."""
    names = tuple(strategies)
    for name in names:
        get_strategy(name)  # unknown names fail on the driver
    columns = [field.split(" ")[0] for field in STEP_SCHEMA.split(", ")]

    def per_group(key: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
        cluster, group = key
        ordered = [
            (float(t), part)
            for t, part in frame.sort_values(["step_t", "topic", "partition"]).groupby("step_t")
        ]
        replays: dict[int, list[tuple[float, pd.DataFrame]]] = {}
        for step in ordered:
            replays.setdefault(int(step[0] // REPLAY_SPAN_S), []).append(step)
        rows: list[list[Any]] = []
        for name in names:
            for replay in replays.values():
                rows.extend(_replay_strategy(name, cluster, group, replay))
        result = pd.DataFrame(rows, columns=columns)
        result["step_ts"] = pd.to_datetime(result["step_ts"], utc=True)
        return result

    def per_batch(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in whole_groups(batches):
            by_key = frame.groupby(["cluster", "group"], sort=False, dropna=False)
            yield pd.concat(
                [per_group(group_key(cluster, group), part) for (cluster, group), part in by_key],
                ignore_index=True,
            )

    selected = points.select(*PARTITION_KEYS, "step_t", "lag", "consumed", "member", "t")
    return by_group_in_batches(selected).mapInPandas(per_batch, STEP_SCHEMA)


def summarize(steps: DataFrame) -> DataFrame:
    """Per (cluster, group, strategy): steps, mean/peak max member lag, mean imbalance, total
    moves, mean time to drain, error, and rank within the group (scored strategies only)."""
    scored = steps.groupBy("cluster", "group", "strategy").agg(
        sf.count(sf.when(sf.col("error").isNull(), sf.col("step_ts"))).alias("steps"),
        sf.avg("max_member_lag").alias("mean_max_member_lag"),
        sf.max("max_member_lag").alias("peak_max_member_lag"),
        sf.avg("lower_bound").alias("mean_lower_bound"),
        sf.avg("imbalance").alias("mean_imbalance"),
        sf.sum("moves").cast("long").alias("total_moves"),
        sf.avg("drain_s").alias("mean_drain_s"),
        sf.first("error", ignorenulls=True).alias("error"),
    )
    by_group = Window.partitionBy("cluster", "group").orderBy(
        sf.col("error").isNotNull(), sf.col("mean_max_member_lag").asc_nulls_last()
    )
    ranked = sf.when(sf.col("error").isNull(), sf.rank().over(by_group))
    return scored.withColumn("rank", ranked)
