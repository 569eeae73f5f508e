"""`forecast` gives, column for column, what the module docstring's rules give when read off each
partition's samples sorted in a plain Python list, on a random history made to hit the corners
of the job's method (one Window operator flagging the first and last sample, the last owner as a
grouping key, each group's newest time joined on a hash of the group keys): equal timestamps,
samples equal in (t, consumed, lag) that differ only in log end or owner (the tie-break decides
the first and last sample), exact duplicates, null commits and null log starts, rewinds, log ends
standing still or stepping back or null, unowned ("") and unread (null) owners, null cluster,
group, topic and partition keys, a topic shared by groups, rows without a time, and several
windows (one sample, part of the history, all of it)."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession

from groupops.lag.forecast import FORECAST_COLUMNS
from groupops.pipeline import forecast
from groupops.pipeline.schema import spark_schema

pytestmark = pytest.mark.pipeline

START = 1_767_225_600
Row = tuple[Any, ...]  # the snapshot columns, in groupops.pipeline.schema.COLUMNS order


def random_history(seed: int) -> list[Row]:
    rng = random.Random(seed)
    rows: list[Row] = []
    for cluster in ("c1", "c2", None):
        for group in ("ga", "gb", None):
            for topic in rng.sample(["shared", "t1", None], 2):
                for partition in (0, 1, None):
                    end = rng.randint(0, 1000)
                    committed = rng.randint(0, end)
                    step = rng.choice([1, 5, 30])
                    times = sorted(
                        rng.choice(range(0, 400, step)) for _ in range(rng.choice([1, 2, 3, 8, 20]))
                    )
                    for t in times:
                        end += rng.choice([0, 0, 1, 5, 50, -3])
                        kind = rng.random()
                        if kind < 0.15:
                            consumed: int | None = None
                        elif kind < 0.25:
                            consumed = max(0, committed - rng.randint(1, 40))
                        elif kind < 0.35:
                            consumed = committed
                        else:
                            committed = min(end + rng.choice([0, 0, 3]), committed + rng.randint(0, 60))
                            consumed = committed
                        seconds = START + t + rng.choice([0, 0, 0.5, 0.000001])
                        ts = None if rng.random() < 0.01 else dt.datetime.fromtimestamp(seconds, dt.UTC)
                        log_start = None if rng.random() < 0.05 else rng.randint(0, 5)
                        log_end = None if rng.random() < 0.03 else end
                        member = rng.choice(["m1", "m2", "", None, "m1"])
                        key = (cluster, group, topic, partition)
                        rows.append((ts, *key, log_start, log_end, consumed, member))
                        if rng.random() < 0.1:
                            rows.append(rows[-1])
                        if rng.random() < 0.15:
                            last = rows[-1]
                            other_end = None if last[6] is None else last[6] + rng.choice([0, 1])
                            rows.append((*last[:6], other_end, last[7], rng.choice(["m0", "m3", "", None])))
    rows.append((None, "c9", "no-time", "t", 0, 0, 10, 5, "m1"))
    return rows


def seconds(ts: dt.datetime) -> float:
    micros = (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return micros / 1_000_000.0


def nulls_first(value: Any) -> tuple[bool, Any]:
    return (value is not None, value if value is not None else 0)


def rate(first: int | None, last: int | None, per_second: float | None) -> float | None:
    return None if per_second is None or first is None or last is None else (last - first) * per_second


def by_the_rules(rows: list[Row], window_s: float, horizon_s: float) -> dict[tuple[Any, ...], Row]:
    """FORECAST_COLUMNS per partition, computed sample by sample from the module docstring."""
    newest: dict[tuple[Any, ...], float] = {}
    for ts, cluster, group, *_ in rows:
        if ts is not None:
            newest[(cluster, group)] = max(newest.get((cluster, group), float("-inf")), seconds(ts))
    samples: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for ts, cluster, group, topic, partition, log_start, log_end, committed, member in rows:
        if ts is None or seconds(ts) < newest[(cluster, group)] - window_s:
            continue
        consumed = committed if committed is not None else log_start
        lag = max(0, log_end - consumed) if log_end is not None and consumed is not None else 0
        samples.setdefault((cluster, group, topic, partition), []).append(
            (seconds(ts), consumed, lag, log_end, member)
        )
    out = {}
    for key, found in samples.items():
        found.sort(key=lambda sample: tuple(nulls_first(field) for field in sample))
        first, last = found[0], found[-1]
        consumed = [sample[1] for sample in found]
        lags = [sample[2] for sample in found]
        pairs = list(itertools.pairwise(found))
        went_back = any(a[1] is not None and b[1] is not None and b[1] < a[1] for a, b in pairs)
        fell = any(b[2] < a[2] for a, b in pairs)
        stood_still = all(c is not None for c in consumed) and len(set(consumed)) == 1
        if len(found) < 2:
            status = "UNKNOWN"
        elif 0 in lags:
            status = "OK"
        elif went_back:
            status = "REWIND"
        elif stood_still:
            status = "STOP" if last[4] == "" else "STALL"
        elif not fell:
            status = "WARN"
        else:
            status = "OK"
        span = last[0] - first[0]
        per_second = 1.0 / span if span > 0 else None
        produce = rate(first[3], last[3], per_second)
        consume = rate(first[1], last[1], per_second)
        if len(found) < 2:
            forecast_lag = last[2]
        else:
            # greatest(0.0, null) is 0.0 in Spark, and round is HALF_UP on the double's exact value.
            moved = None if produce is None or consume is None else last[2] + (produce - consume) * horizon_s
            raw = 0.0 if moved is None else max(0.0, moved)
            forecast_lag = int(Decimal(raw).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=round(last[0] * 1_000_000))
        out[key] = (
            *key,
            when,
            last[4],
            last[2],
            produce,
            consume,
            float(horizon_s),
            float(window_s),
            forecast_lag,
            status,
            len(found),
        )
    return out


WINDOWS = [(60.0, 30.0), (400.0, 0.0), (1.0, 10.0), (10_000.0, 300.0)]  # (window_s, horizon_s)


@pytest.mark.parametrize(("window_s", "horizon_s"), WINDOWS)
def test_forecast_equals_the_rules_on_a_history_of_ties_and_nulls(
    spark: SparkSession, window_s: float, horizon_s: float
) -> None:
    history = random_history(seed=14)
    frame = spark.createDataFrame(history, spark_schema()).repartition(3)

    rows = forecast.forecast(frame, window_s=window_s, horizon_s=horizon_s).collect()

    got = {
        (r["cluster"], r["group"], r["topic"], r["partition"]): tuple(
            r[c].astimezone(dt.UTC) if c == "ts" else r[c] for c in FORECAST_COLUMNS
        )
        for r in rows
    }
    assert len(got) == len(rows)
    assert got == by_the_rules(history, window_s, horizon_s)
