"""Stuck partitions: Burrow's evaluation rules over each partition's recent commits (docs/design.md §4).

Stage: the operator's lag reads feed every partition's `CommitHistory` (through
`planner.lagwindow.PartitionWindow`, kept per policy by `controller.lagread.PolicyLag`); the
reconcile judges it (`judge`) with the partition's owner and whether that owner is live, for
status, Events, metrics and the STALL handoff (`controller.lagstate`). Pure.

Burrow (github.com/linkedin/Burrow, `core/internal/evaluator/caching.go`) keeps a window of the
group's last commits per partition (offset, commit time, lag) and checks, in this order:
OK when the lag is 0 now or anywhere in the window; REWIND when the offset went down between
two commits; STOP when the time since the last commit exceeds the window's own span (the group
stopped committing); STALL when every commit in the window has the same offset (commits keep
coming, the position does not move); WARN when the offset moves but the lag never falls; else OK.

The operator sees committed offsets by polling, not commits with their timestamps, so two rules
are said differently (the pipeline's `forecast` job makes the same adaptation, from snapshots):

1. OK      the lag is 0 in the newest read, or in some read of the window;
2. REWIND  the committed offset went down between two consecutive reads, the later one in the
           window;
3. STOP    the committed offset stood still with lag > 0 in every read across the whole window,
           and no live replica owns the partition: nobody is there to commit (Burrow: the
           commits stopped);
4. STALL   the same standstill while a live replica owns it: it is there and does not advance
           (Burrow: commits keep coming with the same offset);
5. OK      otherwise. Burrow's WARN (moving, but the lag never falls) is not judged: a consumer
           slower than its producer is what the planner and autoscale answer, not a stuck one.

The window is the last `window_s` seconds before the newest read (the reconcile passes the
policy's `consumers.maxPollIntervalSeconds`: the patience the replica's own watchdog and the
heartbeat refusal give a whole replica, here given to each partition). A standstill counts only
once a read at least `window_s` old shows the same offset: the history must cover the window.

The history is not kept as a list of reads: `CommitHistory` carries the newest read and three
moments (the newest zero lag, the newest rewind, the start of the current standstill), which
give exactly the answer of the rules above evaluated over every read in the window
(tests/unit/planner/test_stuck_rules.py holds the two to each other), in constant memory
whatever the read rate.

Example, window 300 s: reads every 10 s with committed 500 and lag 80, 81, 83, ... from t=1000:
OK until t=1300, then STALL if g-1 owns it and is live (STOP if nobody live owns it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

__all__ = ["STUCK_STATES", "CommitHistory", "PartitionState", "judge"]


class PartitionState(enum.Enum):
    """A partition's state under the rules of the module docstring (the values are Burrow's
    names, as status and the metric show them)."""

    OK = "OK"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"


STUCK_STATES = (PartitionState.REWIND, PartitionState.STOP, PartitionState.STALL)
"""The states status lists and Events announce, worst first (Burrow's order of severity)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitHistory:
    """What the rules need of one partition's reads so far.

    t, consumed, lag: the newest read (seconds since the epoch; the group's position: its
    committed offset, or where it starts without one; messages behind).
    zero_lag_at: the newest read with lag 0 (None: none yet).
    rewound_at / rewound_from: the newest read whose position was below the read before it, and
    that earlier position (None: never).
    still_since: the first read of the current standstill, the run of newest reads with the same
    position and lag > 0 in each (None when the newest read has no lag).
    first_t: the first read of all (when this history began).
    """

    t: float
    consumed: int
    lag: int
    zero_lag_at: float | None = None
    rewound_at: float | None = None
    rewound_from: int | None = None
    still_since: float | None = None
    first_t: float = 0.0

    def covers(self, window_s: float) -> bool:
        """Whether the reads reach back a whole window (before that a standstill cannot be told
        from a history too short to show one)."""
        return self.first_t <= self.t - window_s

    @classmethod
    def first(cls, *, t: float, consumed: int, lag: int) -> CommitHistory:
        if lag < 0:
            raise ValueError(f"lag must not be negative, got {lag}")
        return cls(
            t=t,
            consumed=consumed,
            lag=lag,
            zero_lag_at=t if lag == 0 else None,
            still_since=t if lag > 0 else None,
            first_t=t,
        )

    def after(self, *, t: float, consumed: int, lag: int) -> CommitHistory:
        """The history with one more read. A read not newer than the newest (the same read
        offered twice) changes nothing."""
        if t <= self.t:
            return self
        if lag < 0:
            raise ValueError(f"lag must not be negative, got {lag}")
        rewound = consumed < self.consumed
        standing = lag > 0 and self.lag > 0 and consumed == self.consumed and self.still_since is not None
        return replace(
            self,
            t=t,
            consumed=consumed,
            lag=lag,
            zero_lag_at=t if lag == 0 else self.zero_lag_at,
            rewound_at=t if rewound else self.rewound_at,
            rewound_from=self.consumed if rewound else self.rewound_from,
            still_since=(self.still_since if standing else t) if lag > 0 else None,
        )


def judge(history: CommitHistory, *, window_s: float, owner_live: bool) -> PartitionState:
    """The partition's state as of its newest read (rules 1-5 of the module docstring).
    `owner_live`: a replica that takes part in the group owns the partition and is live."""
    if window_s <= 0:
        raise ValueError(f"the window must be positive, got {window_s}")
    opens = history.t - window_s
    if history.lag == 0 or (history.zero_lag_at is not None and history.zero_lag_at >= opens):
        return PartitionState.OK
    if history.rewound_at is not None and history.rewound_at >= opens:
        return PartitionState.REWIND
    if history.still_since is not None and history.still_since <= opens:
        return PartitionState.STALL if owner_live else PartitionState.STOP
    return PartitionState.OK
