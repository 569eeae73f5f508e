"""Burrow's rules over a partition's reads (planner/stuck.py): each rule on a worked history, and
the constant-memory `CommitHistory` judging exactly as the rules evaluated over every read of the
window would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupops.planner.stuck import CommitHistory, PartitionState, judge

OK, STALL, STOP, REWIND = PartitionState.OK, PartitionState.STALL, PartitionState.STOP, PartitionState.REWIND
WINDOW_S = 60.0

Read = tuple[float, int, int]
"""(t, position, lag)"""


def history_of(reads: Sequence[Read]) -> CommitHistory:
    (t, consumed, lag), *rest = reads
    history = CommitHistory.first(t=t, consumed=consumed, lag=lag)
    for t, consumed, lag in rest:
        history = history.after(t=t, consumed=consumed, lag=lag)
    return history


def burrow_over_the_window(reads: Sequence[Read], *, window_s: float, owner_live: bool) -> PartitionState:
    """The rules as the module docstring states them, over every read (the reference)."""
    now = reads[-1][0]
    opens = now - window_s
    inside = [i for i, (t, _, _) in enumerate(reads) if t >= opens]
    if reads[-1][2] == 0 or any(reads[i][2] == 0 for i in inside):
        return OK
    if any(i > 0 and reads[i][1] < reads[i - 1][1] for i in inside):
        return REWIND
    covering = [i for i, (t, _, _) in enumerate(reads) if t <= opens]
    if covering:
        anchor = covering[-1]
        tail = reads[anchor:]
        if all(consumed == tail[0][1] and lag > 0 for _, consumed, lag in tail):
            return STALL if owner_live else STOP
    return OK


def every(seconds: int, *pairs: tuple[int, int]) -> list[Read]:
    """Reads `seconds` apart from t=1000, one per (position, lag)."""
    return [(1000.0 + seconds * i, consumed, lag) for i, (consumed, lag) in enumerate(pairs)]


@pytest.mark.parametrize(
    ("reads", "owner_live", "expected"),
    [
        pytest.param(
            every(10, *[(500, 80 + i) for i in range(8)]), True, STALL, id="standing-under-lag-live"
        ),
        pytest.param(
            every(10, *[(500, 80 + i) for i in range(8)]), False, STOP, id="standing-under-lag-nobody"
        ),
        pytest.param(
            every(10, *[(500, 80 + i) for i in range(6)]), True, OK, id="standing-shorter-than-window"
        ),
        pytest.param(every(10, *[(500, 80)] * 7, (500, 0)), True, OK, id="caught-up-now"),
        pytest.param(every(10, (500, 0), *[(500, 80)] * 6), True, OK, id="caught-up-in-the-window"),
        pytest.param(every(10, (500, 0), *[(500, 80)] * 8), True, STALL, id="caught-up-before-the-window"),
        pytest.param(
            every(10, *[(500 + i, 80) for i in range(8)]), True, OK, id="moving-slowly-is-not-stuck"
        ),
        pytest.param(every(10, (500, 80), (400, 180), (400, 181)), True, REWIND, id="rewound"),
        pytest.param(
            every(10, (500, 80), (400, 180), *[(400 + i, 180) for i in range(8)]),
            True,
            OK,
            id="rewind-aged-out",
        ),
        pytest.param(  # the rewind opens the window: the standstill since covers it too
            every(10, (500, 80), (400, 180), *[(400, 180)] * 6), True, REWIND, id="rewind-outranks-the-stall"
        ),
        pytest.param(every(10, (500, 80)), True, OK, id="one-read"),
    ],
)
def test_each_rule(reads: list[Read], owner_live: bool, expected: PartitionState) -> None:
    assert judge(history_of(reads), window_s=WINDOW_S, owner_live=owner_live) is expected
    assert burrow_over_the_window(reads, window_s=WINDOW_S, owner_live=owner_live) is expected


def test_a_repeated_or_older_read_changes_nothing_and_bad_input_is_refused() -> None:
    history = history_of(every(10, (500, 80), (510, 70)))
    assert history.after(t=history.t, consumed=1, lag=1) is history
    assert history.after(t=history.t - 5, consumed=1, lag=1) is history
    with pytest.raises(ValueError, match="negative"):
        history.after(t=history.t + 1, consumed=1, lag=-1)
    with pytest.raises(ValueError, match="window"):
        judge(history, window_s=0, owner_live=True)


def test_the_rewind_remembers_where_it_came_from() -> None:
    history = history_of(every(10, (500, 80), (400, 180)))
    assert (history.rewound_at, history.rewound_from) == (1010.0, 500)


@st.composite
def reads(draw: st.DrawFn) -> list[Read]:
    n = draw(st.integers(1, 30))
    t, consumed, result = 0.0, draw(st.integers(0, 50)), []
    for _ in range(n):
        t += draw(st.sampled_from([1.0, 5.0, 10.0, 30.0]))
        consumed += draw(st.sampled_from([0, 0, 0, 1, 5, -3]))  # mostly standing, sometimes back
        result.append((t, max(0, consumed), draw(st.sampled_from([0, 3, 40]))))
    return result


@given(history=reads(), window_s=st.sampled_from([5.0, 20.0, 60.0, 300.0]), owner_live=st.booleans())
def test_the_history_judges_as_the_rules_over_every_read_in_the_window(
    history: list[Read], window_s: float, owner_live: bool
) -> None:
    expected = burrow_over_the_window(history, window_s=window_s, owner_live=owner_live)
    assert judge(history_of(history), window_s=window_s, owner_live=owner_live) is expected
