"""`backtest` replays a Zipf-skewed history under every strategy: balanced ≤ lag ≤ range on max
member lag in every group; `report` (through its job entry point) writes the HTML page and the
three PNG charts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline import backtest, jobs, synthetic
from groupops.pipeline.io import InputSpec

pytestmark = pytest.mark.pipeline

GROUPS = 4
STEPS = 12


@pytest.fixture(scope="module")
def skewed(spark: SparkSession) -> Iterator[DataFrame]:
    frame = synthetic.skewed_history(spark, groups=GROUPS, steps=STEPS).cache()
    yield frame
    frame.unpersist()


@pytest.fixture(scope="module")
def steps(skewed: DataFrame) -> Iterator[DataFrame]:
    points = backtest.replay_points(skewed, step_s=60)
    frame = backtest.backtest(points).cache()
    yield frame
    frame.unpersist()


def test_every_strategy_is_scored_at_every_step(steps: DataFrame) -> None:
    counts = {
        (r["group"], r["strategy"]): r["count"] for r in steps.groupBy("group", "strategy").count().collect()
    }
    assert counts == {(f"skew{g:02d}", s): STEPS for g in range(GROUPS) for s in backtest.BACKTEST_STRATEGIES}
    assert steps.where(sf.col("error").isNotNull()).count() == 0
    below_bound = steps.where(sf.col("max_member_lag") < sf.col("lower_bound") - 1e-9).count()
    assert below_bound == 0
    # The first step starts from the real (range-shaped) owners: range and sticky move nothing.
    still = steps.where(sf.col("strategy").isin("range", "sticky")).agg(sf.sum("moves")).first()
    assert still is not None and still[0] == 0


def test_skewed_ranking_is_balanced_then_lag_then_range(steps: DataFrame) -> None:
    summary = {(r["group"], r["strategy"]): r for r in backtest.summarize(steps).collect()}
    for g in range(GROUPS):
        group = f"skew{g:02d}"
        balanced, lag, range_ = (
            summary[(group, s)]["mean_max_member_lag"] for s in ("balanced", "lag", "range")
        )
        assert balanced <= lag <= range_, group
        assert summary[(group, "balanced")]["rank"] == 1
        assert summary[(group, "range")]["mean_drain_s"] >= summary[(group, "balanced")]["mean_drain_s"]


def test_a_strategy_that_is_not_implemented_is_reported_not_scored(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_yet(document: object) -> object:
        raise NotImplementedError("balanced")

    monkeypatch.setattr(backtest, "plan_group", not_yet)
    frame = pd.DataFrame(
        {
            "topic": ["t", "t"],
            "partition": [0, 1],
            "lag": [5, 7],
            "consumed": [10, 20],
            "member": ["a", "b"],
            "t": [60.0, 60.0],
        }
    )
    rows = backtest._replay_strategy("balanced", "c1", "g1", [(60.0, frame)])
    assert len(rows) == 1
    assert rows[0][2] == "balanced" and rows[0][-1] == "not implemented"


def test_report_writes_the_html_and_three_pngs(
    spark: SparkSession, skewed: DataFrame, tmp_path: Path
) -> None:
    snapshots = tmp_path / "snapshots"
    skewed.withColumn("date", sf.date_format("ts", "yyyy-MM-dd")).write.partitionBy("date").parquet(
        str(snapshots)
    )
    options = jobs.JobOptions(input=InputSpec(path=snapshots), out=tmp_path / "out", step_s=60)

    result = jobs.run_job("report", spark, options)

    page = Path(result.outputs["report"])
    charts = [
        Path(result.outputs[name]) for name in ("lag_over_time", "strategy_comparison", "imbalance_heatmap")
    ]
    for chart in charts:
        data = chart.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(data) > 10_000, chart  # a drawn chart, not an empty canvas
    text = page.read_text(encoding="utf-8")
    for chart in charts:
        assert f'src="{chart.name}"' in text
    for g in range(GROUPS):
        assert f"skew{g:02d}" in text
    for strategy in backtest.BACKTEST_STRATEGIES:
        assert f"<td>{strategy}</td>" in text
    assert result.rows["backtest"] == GROUPS * len(backtest.BACKTEST_STRATEGIES)
    assert result.figures["strategies"]["balanced"]["wins"] == GROUPS
