"""A policy's lag reads run off the reconcile's path: a run waits a bounded time for the read it
started, a slow read lands later and wakes the loop, a failed read keeps the last good lag, and
partition counts can come from the plan when nothing else is known."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from groupops.controller.lagread import PolicyLag, counts_from_plan, zero_lag
from groupops.lag import LagSnapshot, LagSourceUnavailable
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=2)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def snapshot(lag: int) -> LagSnapshot:
    return LagSnapshot(group_id="g", taken_at=0.0, lags={"t": [lag, lag]})


def test_a_quick_read_is_used_by_the_run_that_started_it(pool: ThreadPoolExecutor) -> None:
    woken: list[bool] = []
    take = PolicyLag().take(
        lambda: snapshot(5), pool=pool, wait_s=5.0, on_late_result=lambda: woken.append(True)
    )
    assert take.snapshot == snapshot(5)
    assert take.error is None
    time.sleep(0.1)
    assert woken == [], "a result the run used must not wake the loop again"


def test_a_slow_read_does_not_hold_the_run_and_wakes_the_loop_when_it_lands(pool: ThreadPoolExecutor) -> None:
    release = threading.Event()
    woken = threading.Event()
    lag = PolicyLag()

    def slow() -> LagSnapshot:
        release.wait(10)
        return snapshot(7)

    started = time.monotonic()
    take = lag.take(slow, pool=pool, wait_s=0.2, on_late_result=woken.set)
    assert time.monotonic() - started < 2.0
    assert take.snapshot is None and take.error is None
    again = lag.take(lambda: pytest.fail("a second read while one is in flight"), pool=pool, wait_s=0.0)
    assert again.snapshot is None
    release.set()
    assert woken.wait(5), "the late result must wake the loop"
    assert lag.take(lambda: snapshot(8), pool=pool, wait_s=5.0).snapshot == snapshot(8)


def test_a_failed_read_keeps_the_last_good_lag_and_reports_the_error(pool: ThreadPoolExecutor) -> None:
    lag = PolicyLag()
    assert lag.take(lambda: snapshot(3), pool=pool, wait_s=5.0).snapshot == snapshot(3)

    def down() -> LagSnapshot:
        raise LagSourceUnavailable("connection refused (http://127.0.0.1:9)")

    take = lag.take(down, pool=pool, wait_s=5.0)
    assert take.snapshot == snapshot(3)
    assert isinstance(take.error, LagSourceUnavailable)
    assert take.age_s is not None and take.age_s >= 0
    healed = lag.take(lambda: snapshot(4), pool=pool, wait_s=5.0)
    assert healed.snapshot == snapshot(4) and healed.error is None


def test_without_a_pool_the_read_happens_in_the_run() -> None:
    assert PolicyLag().take(lambda: snapshot(1), pool=None, wait_s=0.0).snapshot == snapshot(1)


def plan(**releasing: int) -> PublishedPlan:
    return PublishedPlan(
        plan=Plan(
            epoch=3,
            strategy="failover",
            assignment={
                MemberId("g-0"): (TopicPartition("a", 0), TopicPartition("a", 4)),
                MemberId("g-1"): (),
            },
        ),
        releasing={
            TopicPartition(t, p): Release(identity=MemberId("g-1"), epoch=3) for t, p in releasing.items()
        },
    )


@pytest.mark.parametrize(
    ("published", "topics", "expected"),
    [
        pytest.param(plan(), ["a"], {"a": 5}, id="highest-partition-plus-one"),
        pytest.param(plan(b=2), ["a", "b"], {"a": 5, "b": 3}, id="releasing-partitions-count"),
        pytest.param(plan(), ["a", "b"], None, id="a-topic-the-plan-never-names"),
    ],
)
def test_partition_counts_from_the_plan(
    published: PublishedPlan, topics: list[str], expected: dict[str, int] | None
) -> None:
    assert counts_from_plan(published, topics) == expected


def test_a_counts_only_snapshot_has_no_lag() -> None:
    assert zero_lag("g", {"a": 3}).lags == {"a": [0, 0, 0]}


def test_a_read_cancelled_by_the_operator_stopping_is_no_error_and_no_crash() -> None:
    executor = ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    executor.submit(release.wait)  # the only worker is busy: the next read stays queued
    lag = PolicyLag()
    stopping = threading.Timer(0.1, lambda: executor.shutdown(wait=False, cancel_futures=True))
    stopping.start()
    take = lag.take(lambda: snapshot(1), pool=executor, wait_s=5.0, on_late_result=lambda: None)
    release.set()
    stopping.join()
    assert take.snapshot is None and take.error is None, "a cancelled read read nothing and failed nothing"
