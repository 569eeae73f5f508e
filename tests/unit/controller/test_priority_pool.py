"""The urgent lane's pool starts its most urgent queued call first, calls of one priority in the
order they came (docs/design.md §8.3); cancelled, failed and late calls behave as a Future's do.
Real threads: the only worker is held by a call that waits on an event."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.controller.priority_pool import PriorityExecutor

_WAIT_S = 10.0


def held(pool: PriorityExecutor) -> threading.Event:
    """Occupy the pool's only worker until the returned event is set."""
    started, release = threading.Event(), threading.Event()

    def occupy() -> None:
        started.set()
        release.wait(_WAIT_S)

    pool.submit_at(-1, occupy)
    assert started.wait(_WAIT_S)
    return release


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12))
def test_queued_calls_start_by_priority_then_in_the_order_they_came(priorities: list[int]) -> None:
    pool = PriorityExecutor(1, thread_name_prefix="urgent")
    started: list[int] = []
    try:
        release = held(pool)
        futures = [
            pool.submit_at(priority, lambda index=index: started.append(index))
            for index, priority in enumerate(priorities)
        ]
        release.set()
        for future in futures:
            future.result(timeout=_WAIT_S)
    finally:
        pool.shutdown(wait=True)
    assert started == sorted(range(len(priorities)), key=lambda index: (priorities[index], index))


def test_results_exceptions_cancellation_and_shutdown() -> None:
    pool = PriorityExecutor(1, thread_name_prefix="urgent", default_priority=1)
    release = held(pool)
    answer = pool.submit(lambda x: x * 2, 21)
    failing = pool.submit_at(0, lambda: 1 / 0)
    cancelled = pool.submit_at(0, lambda: "never")
    assert cancelled.cancel()
    left = pool.submit_at(2, lambda: "dropped at shutdown")
    release.set()
    assert answer.result(timeout=_WAIT_S) == 42
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=_WAIT_S)
    assert cancelled.cancelled()
    pool.shutdown(wait=True, cancel_futures=True)
    assert left.cancelled() or left.result(timeout=0) == "dropped at shutdown"
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)


def test_queued_calls_run_before_a_shutdown_without_cancel_ends_the_workers() -> None:
    pool = PriorityExecutor(2, thread_name_prefix="urgent")
    done = [pool.submit_at(priority, lambda priority=priority: priority) for priority in (3, 1, 2)]
    pool.shutdown(wait=True)
    assert [future.result(timeout=0) for future in done] == [3, 1, 2]


def test_no_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PriorityExecutor(0, thread_name_prefix="urgent")


def test_a_deferring_pool_holds_its_calls_while_told_to_and_never_beyond_the_deferral() -> None:
    """The routine lane's pool yields to a waiting urgent run (design §8.3): nothing starts while
    `defer_while` says so, everything starts once it stops saying so, and a call held back for
    `max_deferral_s` starts anyway."""
    urgent_waiting = threading.Event()
    urgent_waiting.set()
    pool = PriorityExecutor(
        2, thread_name_prefix="routine", defer_while=urgent_waiting.is_set, max_deferral_s=_WAIT_S * 6
    )
    try:
        started = threading.Event()
        held_back = pool.submit(started.set)
        assert not started.wait(0.3), "started while the urgent lane had calls waiting"
        urgent_waiting.clear()
        held_back.result(timeout=_WAIT_S)
    finally:
        pool.shutdown(wait=True)

    bounded = PriorityExecutor(1, thread_name_prefix="routine", defer_while=lambda: True, max_deferral_s=0.2)
    try:
        assert bounded.submit(lambda: "ran").result(timeout=_WAIT_S) == "ran"
    finally:
        bounded.shutdown(wait=True)


def test_a_deferring_pool_still_drains_at_shutdown_and_refuses_a_negative_deferral() -> None:
    pool = PriorityExecutor(
        1, thread_name_prefix="routine", defer_while=lambda: True, max_deferral_s=_WAIT_S * 6
    )
    queued = pool.submit(lambda: "ran at shutdown")
    pool.shutdown(wait=True)
    assert queued.result(timeout=_WAIT_S) == "ran at shutdown"
    with pytest.raises(ValueError, match="max_deferral_s"):
        PriorityExecutor(1, thread_name_prefix="routine", max_deferral_s=-1.0)


def test_backlogged_says_whether_a_call_waits_for_a_worker() -> None:
    pool = PriorityExecutor(1, thread_name_prefix="urgent")
    try:
        assert not pool.backlogged()
        release = held(pool)
        assert not pool.backlogged(), "the running call is not waiting"
        waiting = pool.submit(lambda: None)
        assert pool.backlogged()
        release.set()
        waiting.result(timeout=_WAIT_S)
        assert not pool.backlogged()
    finally:
        pool.shutdown(wait=True)
