"""Time lag: each partition's recent log end offsets over time, and how many seconds a group is
behind (docs/design.md §4).

Stage: every successful lag read that carries offsets (the `kafka` source) advances the policy's
windows (`advance`, called by `controller.lagread.PolicyLag` off the reconcile's path); the
reconcile reports what they say (`controller.lagstate`). Pure: values in, values out.

Definition (the Spark pipeline's `timelag` job, operator/groupops/pipeline/timelag.py, on the same
points; kafka-lag-exporter's method): the (log end offset, time) points of a partition form a
table; τ(c), when the log end was at offset c, is read from it:

1. c at or above the newest log end: caught up, time lag 0;
2. a point at exactly c: the earliest time the log end was at c;
3. points below and above c: linear interpolation between the newest point of the highest offset
   below c and the earliest point of the lowest offset above it;
4. c below the oldest point: extrapolated back from the oldest point with the window's average
   produce rate, (newest offset - oldest offset) / (newest time - oldest time);

and the time lag of the newest read, at time t with position c, is max(0, t - τ(c)). On a steady
producer (log end = a + r·t) this is exactly lag / r.

One deliberate difference: where rule 4 has no rate (the log end stood still across the whole
window, or the window has one point) the pipeline has no τ and reports 0, which says "caught up"
of a group that may be hours behind on an idle topic. The operator reports the window's age,
t - oldest time, instead: a lower bound (the log end was past c already at the oldest point), and
0 for a single point, as the pipeline.

The table (`add_point`), bounded as kafka-lag-exporter bounds its lookup table:
- at most `WindowLimits.points` points (60), the oldest dropped first;
- a flat run (the log end not moving) keeps only its first and newest point: τ needs the earliest
  time at an offset (rule 2, the point above c) and the newest (the point below c), nothing
  between, so an idle partition's table reaches back as far as its first point;
- while the newest point is less than `spacing_s` (15 s) after the one before it, a new point
  replaces it instead of adding one: the newest read is always in the table (the query's own
  point, as in the pipeline), the others are 15 s apart or more, and 60 points hold about 15
  minutes of a busy partition however often the operator reads. Between two kept points the log
  end is taken as linear, so the answer may be off by up to the spacing; the pipeline keeps every
  point;
- a log end below the newest (the topic was deleted and created again) starts the table afresh.

The pipeline's history is every snapshot ever taken of the topic; the window is 60 points. On the
same points (tests/pipeline/test_time_lag_matches_the_operator.py) the two agree.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from groupops.planner.stuck import CommitHistory

__all__ = [
    "DEFAULT_LIMITS",
    "EndPoint",
    "PartitionWindow",
    "Sample",
    "WindowLimits",
    "add_point",
    "advance",
    "produced_at",
    "time_lag_s",
]

Key = TypeVar("Key")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """The partition's log end offset was `offset` at `t` (seconds since the epoch)."""

    offset: int
    t: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowLimits:
    """points: the most (log end, time) points kept per partition (memory: 60 x 2 numbers);
    spacing_s: the least time between kept points but the newest, so that 60 points cover about
    15 minutes of a partition read every few seconds (0: keep every read)."""

    points: int = 60
    spacing_s: float = 15.0

    def __post_init__(self) -> None:
        if self.points < 2 or self.spacing_s < 0:
            raise ValueError(f"a window needs 2 points or more and a spacing >= 0, got {self}")


DEFAULT_LIMITS = WindowLimits()


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One read of one partition: when, its log end, the group's position (committed offset,
    or where it starts without one) and its lag."""

    t: float
    log_end: int
    consumed: int
    lag: int


def add_point(
    points: tuple[EndPoint, ...], point: EndPoint, limits: WindowLimits = DEFAULT_LIMITS
) -> tuple[EndPoint, ...]:
    """The table with `point` added, by the rules of the module docstring. A point not newer
    than the newest is ignored."""
    if not points:
        return (point,)
    newest = points[-1]
    if point.t <= newest.t:
        return points
    if point.offset < newest.offset:
        return (point,)
    if len(points) >= 2:
        before = points[-2]
        if before.offset == newest.offset == point.offset:
            return (*points[:-1], point)  # the flat run goes on: move its newest end
        if before.offset != newest.offset != point.offset and newest.t - before.t < limits.spacing_s:
            return (*points[:-1], point)  # the newest came too soon after the one before: replace it
    return (*points, point)[-limits.points :]


def produced_at(points: Sequence[EndPoint], offset: int) -> float | None:
    """τ(offset): when the log end was at `offset` (rules 2-4 of the module docstring); None where
    the points cannot say (nothing at or above it, or below the oldest without a rate)."""
    if not points:
        return None
    offsets = [p.offset for p in points]  # non-decreasing: `add_point` restarts on a decrease
    above = bisect.bisect_left(offsets, offset)
    if above == len(points):
        return None
    after = points[above]  # the earliest point of the lowest offset >= `offset`
    if after.offset == offset:
        return after.t
    if above == 0:
        oldest, newest = points[0], points[-1]
        span = newest.t - oldest.t
        rate = (newest.offset - oldest.offset) / span if span > 0 else 0.0
        return after.t - (after.offset - offset) / rate if rate > 0 else None
    before = points[above - 1]  # the newest point of the highest offset below `offset`
    return before.t + (offset - before.offset) * (after.t - before.t) / (after.offset - before.offset)


def time_lag_s(points: Sequence[EndPoint], consumed: int) -> float:
    """Seconds behind, as of the newest point, of a group at position `consumed` (the module
    docstring's definition). The newest point is the read's own: its log end and time."""
    if not points:
        raise ValueError("time lag needs at least the read's own point")
    newest = points[-1]
    if consumed >= newest.offset:
        return 0.0
    tau = produced_at(points, consumed)
    if tau is None:  # the log end was past `consumed` before the window began: at least its age
        return newest.t - points[0].t
    return max(0.0, newest.t - tau)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionWindow:
    """One partition's window after its newest read: the log end table, the commit history
    (`planner.stuck`), and the time lag and lag of that read."""

    ends: tuple[EndPoint, ...]
    commits: CommitHistory
    time_lag_s: float
    lag: int

    @property
    def age_s(self) -> float:
        """How far back the table reaches."""
        return self.ends[-1].t - self.ends[0].t

    @classmethod
    def first(cls, sample: Sample) -> PartitionWindow:
        ends = (EndPoint(sample.log_end, sample.t),)
        return cls(
            ends=ends,
            commits=CommitHistory.first(t=sample.t, consumed=sample.consumed, lag=sample.lag),
            time_lag_s=time_lag_s(ends, sample.consumed),
            lag=sample.lag,
        )

    def after(self, sample: Sample, limits: WindowLimits = DEFAULT_LIMITS) -> PartitionWindow:
        """The window with one more read (a read not newer than the newest changes nothing)."""
        if sample.t <= self.commits.t:
            return self
        ends = add_point(self.ends, EndPoint(sample.log_end, sample.t), limits)
        return PartitionWindow(
            ends=ends,
            commits=self.commits.after(t=sample.t, consumed=sample.consumed, lag=sample.lag),
            time_lag_s=time_lag_s(ends, sample.consumed),
            lag=sample.lag,
        )


def advance(
    windows: Mapping[Key, PartitionWindow],
    samples: Mapping[Key, Sample],
    limits: WindowLimits = DEFAULT_LIMITS,
) -> dict[Key, PartitionWindow]:
    """Every partition's window after one read of the group: partitions the read did not
    include (a topic deleted or left out of the policy) are dropped."""
    return {
        key: windows[key].after(sample, limits) if key in windows else PartitionWindow.first(sample)
        for key, sample in samples.items()
    }
