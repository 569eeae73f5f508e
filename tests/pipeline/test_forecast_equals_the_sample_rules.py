"""`forecast` (sorted window, `lag()` pairs and aggregates) gives exactly what Burrow's rules give
when read off each partition's samples sorted in a plain Python list: on a small history with a
rewind between two samples, equal timestamps, never-committed rows, unowned and unread owners,
a partition with one sample in its window, and two groups whose windows end at different times."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import SparkSession

from groupops.pipeline import forecast
from groupops.pipeline.schema import spark_schema

pytestmark = pytest.mark.pipeline

START = 1_767_225_600
WINDOW_S, HORIZON_S = 60.0, 30.0

# (group, partition) → [(seconds after START, log_end, committed, member)]
HISTORY: dict[tuple[str, int], list[tuple[int, int, int | None, str | None]]] = {
    ("g1", 0): [(0, 100, 50, "a"), (30, 160, 120, "a"), (40, 180, 110, "a"), (60, 200, 130, "a")],
    ("g1", 1): [(10, 100, 40, "a"), (30, 130, 40, "a"), (60, 190, 40, "a")],
    ("g1", 2): [(10, 100, 40, "b"), (30, 130, 40, "b"), (60, 190, 40, "")],
    ("g1", 3): [(-100, 100, 40, "b"), (-90, 110, 40, "b"), (60, 190, 80, "b")],
    ("g1", 4): [(10, 100, None, "a"), (30, 140, None, "a"), (60, 200, 150, "a")],
    ("g1", 5): [(10, 100, 90, "a"), (30, 140, 140, "a"), (60, 200, 170, "a")],
    ("g1", 6): [(10, 100, 90, "b"), (30, 140, 120, "b"), (60, 200, 160, "b")],
    ("g1", 7): [(30, 140, 100, "a"), (30, 140, 90, "a"), (60, 200, 150, "a")],
    ("g1", 8): [(10, 100, 40, None), (30, 130, 40, None), (60, 190, 40, None)],
    ("g2", 0): [(0, 100, 50, "c"), (20, 160, 70, "c"), (400, 900, 800, "c")],
    ("g2", 1): [(330, 100, 90, "c"), (360, 130, 95, "c"), (390, 190, 100, "c")],
}
LOG_START = 10


def snapshot_rows() -> list[tuple[Any, ...]]:
    return [
        (
            dt.datetime.fromtimestamp(START + t, dt.UTC),
            "c1",
            group,
            "events",
            partition,
            LOG_START,
            log_end,
            committed,
            member,
        )
        for (group, partition), samples in HISTORY.items()
        for t, log_end, committed, member in samples
    ]


def burrow(samples: list[tuple[float, int, int, int, str | None]]) -> str:
    """Status from samples sorted as (t, consumed, lag, log_end, member), as the docstring says."""
    if len(samples) < 2:
        return "UNKNOWN"
    consumed = [s[1] for s in samples]
    lags = [s[2] for s in samples]
    if any(lag == 0 for lag in lags):
        return "OK"
    if any(consumed[i] < consumed[i - 1] for i in range(1, len(samples))):
        return "REWIND"
    if all(c == consumed[0] for c in consumed):
        return "STOP" if samples[-1][4] == "" else "STALL"
    if all(lags[i] >= lags[i - 1] for i in range(1, len(samples))):
        return "WARN"
    return "OK"


def expected() -> dict[tuple[str, int], tuple[str, int, int, int, str | None]]:
    """(status, samples, lag now, forecast lag, member now) per partition."""
    newest = {
        group: max(t for (g, _), samples in HISTORY.items() if g == group for t, *_ in samples)
        for group, _ in HISTORY
    }
    out = {}
    for (group, partition), rows in HISTORY.items():
        samples = []
        for t, log_end, committed, member in rows:
            if t >= newest[group] - WINDOW_S:
                consumed = LOG_START if committed is None else committed
                samples.append((float(t), consumed, max(0, log_end - consumed), log_end, member))
        samples.sort(key=lambda s: (s[0], s[1], s[2], s[3], s[4] is not None, s[4] or ""))
        first, last = samples[0], samples[-1]
        span = last[0] - first[0]
        if len(samples) >= 2:
            per_second = 1.0 / span if span > 0 else None
            produce = (last[3] - first[3]) * per_second if per_second else 0.0
            consume = (last[1] - first[1]) * per_second if per_second else 0.0
            forecast_lag = int(max(0.0, last[2] + (produce - consume) * HORIZON_S) + 0.5)
        else:
            forecast_lag = last[2]
        out[(group, partition)] = (burrow(samples), len(samples), last[2], forecast_lag, last[4])
    return out


def test_forecast_equals_the_rules_on_sorted_samples(spark: SparkSession) -> None:
    frame = spark.createDataFrame(snapshot_rows(), spark_schema())

    rows = forecast.forecast(frame, window_s=WINDOW_S, horizon_s=HORIZON_S).collect()

    got = {
        (r["group"], r["partition"]): (r["status"], r["samples"], r["lag"], r["forecast_lag"], r["member"])
        for r in rows
    }
    assert got == expected()
    assert {status for status, *_ in got.values()} == {"OK", "WARN", "STOP", "STALL", "REWIND", "UNKNOWN"}
