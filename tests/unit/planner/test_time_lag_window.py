"""Time lag from a window of (log end offset, time) points (planner/lagwindow.py): the pipeline's
definition on worked examples, the window's bounds, and properties that hold for any history:
0 when caught up, never less when further behind, at most the window's age when the position is
inside it, and the compressed table answering as every raw point would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupops.planner.lagwindow import (
    EndPoint,
    PartitionWindow,
    Sample,
    WindowLimits,
    add_point,
    advance,
    produced_at,
    time_lag_s,
)

EVERY_POINT = WindowLimits(points=10_000, spacing_s=0.0)


def table(*points: tuple[int, float], limits: WindowLimits = EVERY_POINT) -> tuple[EndPoint, ...]:
    result: tuple[EndPoint, ...] = ()
    for offset, t in points:
        result = add_point(result, EndPoint(offset, t), limits)
    return result


def reference_time_lag(points: Sequence[tuple[int, float]], consumed: int) -> float:
    """The pipeline's `timelag` (operator/groupops/pipeline/timelag.py) for the newest point,
    over every raw point, as its SQL reads: the point before is the greatest (offset, t) below
    the position, the point after the least (offset, t) at or above it, the rate from the
    smallest and largest offsets and times; plus the operator's one difference, the window's
    age where the pipeline has no τ."""
    offset_now, t_now = points[-1]
    if consumed >= offset_now:
        return 0.0
    below = [p for p in points if p[0] < consumed]
    above = [p for p in points if p[0] >= consumed]
    after = min(above)
    first_t, last_t = min(t for _, t in points), max(t for _, t in points)
    first_o, last_o = min(o for o, _ in points), max(o for o, _ in points)
    rate = (last_o - first_o) / (last_t - first_t) if last_t > first_t else None
    if after[0] == consumed:
        tau: float | None = after[1]
    elif not below:
        tau = after[1] - (after[0] - consumed) / rate if rate else None
    else:
        before = max(below)
        tau = before[1] + (consumed - before[0]) * (after[1] - before[1]) / (after[0] - before[0])
    if tau is None:
        return t_now - first_t
    return max(0.0, t_now - tau)


# -- worked examples ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "consumed", "expected"),
    [
        pytest.param([(100, 0), (200, 10), (300, 20)], 300, 0.0, id="committed-at-the-end"),
        pytest.param([(100, 0), (200, 10), (300, 20)], 350, 0.0, id="committed-past-the-end"),
        pytest.param([(100, 0), (200, 10), (300, 20)], 250, 5.0, id="interpolated-between-two-points"),
        pytest.param([(100, 0), (200, 10), (300, 20)], 200, 10.0, id="exactly-at-a-point"),
        pytest.param(
            [(100, 0), (200, 10), (200, 20), (200, 30), (300, 40)], 200, 30.0, id="at-a-flat-run-its-start"
        ),
        pytest.param(
            [(100, 0), (200, 10), (200, 20), (200, 30), (300, 40)], 250, 5.0, id="above-a-flat-run-its-end"
        ),
        pytest.param([(100, 0), (200, 10), (300, 20)], 50, 25.0, id="below-the-oldest-extrapolated"),
        pytest.param([(100, 0), (100, 60), (100, 90)], 50, 90.0, id="below-a-flat-window-its-age"),
        pytest.param([(100, 0)], 50, 0.0, id="one-point-no-rate"),
    ],
)
def test_time_lag_of_the_newest_point(
    points: list[tuple[int, float]], consumed: int, expected: float
) -> None:
    assert time_lag_s(table(*points), consumed) == pytest.approx(expected)
    assert reference_time_lag(points, consumed) == pytest.approx(expected)


def test_a_steady_producer_gives_lag_over_rate() -> None:
    rate, lag = 40, 1_000
    points = table(*[(5_000 + rate * t, float(t)) for t in range(0, 301, 15)])
    assert time_lag_s(points, points[-1].offset - lag) == pytest.approx(lag / rate)


def test_nothing_to_read_from_is_a_bug() -> None:
    with pytest.raises(ValueError, match="read's own point"):
        time_lag_s((), 10)
    assert produced_at((), 10) is None


# -- the table's bounds -------------------------------------------------------------------------


def test_a_flat_run_keeps_its_first_and_newest_point() -> None:
    assert table((100, 0), (200, 10), (200, 20), (200, 30), (200, 40)) == (
        EndPoint(100, 0),
        EndPoint(200, 10),
        EndPoint(200, 40),
    )


def test_at_most_the_limit_of_points_the_oldest_dropped_first() -> None:
    limits = WindowLimits(points=5, spacing_s=0)
    kept = table(*[(10 * i, float(i)) for i in range(12)], limits=limits)
    assert kept == tuple(EndPoint(10 * i, float(i)) for i in range(7, 12))


def test_a_read_sooner_than_the_spacing_replaces_the_newest_point() -> None:
    limits = WindowLimits(points=60, spacing_s=15)
    kept = table((0, 0), (10, 5), (20, 10), (30, 15), (40, 20), (50, 31), limits=limits)
    assert kept == (EndPoint(0, 0), EndPoint(30, 15), EndPoint(50, 31)), "the newest is the read's own"


def test_sixty_points_fifteen_seconds_apart_cover_fifteen_minutes_read_every_five() -> None:
    kept = table(*[(7 * i, 5.0 * i) for i in range(1_000)], limits=WindowLimits())
    assert len(kept) == 60
    assert kept[-1].t - kept[0].t >= 15 * 60 - 15


def test_a_log_end_going_back_starts_afresh_and_older_or_repeated_reads_change_nothing() -> None:
    points = table((100, 0), (200, 10))
    assert add_point(points, EndPoint(300, 10)) == points, "the same read twice"
    assert add_point(points, EndPoint(300, 5)) == points, "an older read"
    assert add_point(points, EndPoint(50, 20)) == (EndPoint(50, 20),), "the topic was created again"


def test_advance_drops_partitions_the_read_left_out_and_starts_new_ones() -> None:
    first = advance({}, {"a": Sample(t=0, log_end=10, consumed=10, lag=0)})
    second = advance(first, {"b": Sample(t=10, log_end=5, consumed=0, lag=5)})
    assert set(second) == {"b"}
    assert second["b"] == PartitionWindow.first(Sample(t=10, log_end=5, consumed=0, lag=5))


# -- properties ---------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, float]]:
    """Reads of a partition: times strictly increasing, the log end never going back (runs of
    reads where it stands still included)."""
    n = draw(st.integers(1, 40))
    steps = draw(st.lists(st.integers(0, 500), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    offset, t, points = draw(st.integers(0, 10_000)), 0.0, []
    for step, gap in zip(steps, gaps, strict=True):
        offset += step if step > 250 else 0  # about half the reads see no new message
        t += gap
        points.append((offset, t))
    return points


@given(history=histories(), data=st.data())
def test_the_table_answers_as_every_raw_point_would(
    history: list[tuple[int, float]], data: st.DataObject
) -> None:
    consumed = data.draw(st.integers(0, history[-1][0] + 10))
    assert time_lag_s(table(*history), consumed) == pytest.approx(reference_time_lag(history, consumed))


@given(history=histories())
def test_caught_up_is_zero(history: list[tuple[int, float]]) -> None:
    assert time_lag_s(table(*history), history[-1][0]) == 0.0


@given(history=histories(), data=st.data())
def test_further_behind_is_never_less_time_lag(history: list[tuple[int, float]], data: st.DataObject) -> None:
    points = table(*history, limits=WindowLimits())
    ahead = data.draw(st.integers(0, history[-1][0] + 10))
    behind = data.draw(st.integers(0, ahead))
    assert time_lag_s(points, behind) >= time_lag_s(points, ahead) - 1e-9 >= -1e-9


@given(history=histories(), data=st.data())
def test_inside_the_window_at_most_its_age(history: list[tuple[int, float]], data: st.DataObject) -> None:
    points = table(*history, limits=WindowLimits(points=8, spacing_s=15))
    consumed = data.draw(st.integers(points[0].offset, points[-1].offset + 10))
    assert 0.0 <= time_lag_s(points, consumed) <= points[-1].t - points[0].t + 1e-9
