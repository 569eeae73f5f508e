"""A routine run still queued behind the tick's other runs is promoted to the urgent lane when a
wake-up or an expiry comes first; one that already started is left to finish (docs/design.md §8.3).

Real thread pools: the routine lane is held busy by a run that waits on an event."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from groupops.controller.lanes import CONTAINER, EXPIRY, TICK, WOKEN, Lanes, Ran
from groupops.controller.priority_pool import PriorityExecutor
from groupops.controller.wakeup import Wakeup
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock

_WAIT_S = 10.0


@pytest.fixture
def lanes() -> Iterator[Lanes]:
    routine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="routine")
    urgent = ThreadPoolExecutor(max_workers=1, thread_name_prefix="urgent")
    yield Lanes(routine=routine, urgent=urgent)
    routine.shutdown(wait=True, cancel_futures=True)
    urgent.shutdown(wait=True, cancel_futures=True)


def thread_name() -> str:
    return threading.current_thread().name


def hold(lanes: Lanes) -> threading.Event:
    """Occupy the routine lane's only worker until the returned event is set."""
    release = threading.Event()
    lanes.routine.submit(release.wait, _WAIT_S)
    return release


def run_scenario(scenario: Callable[[asyncio.Future[Any]], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        stopping: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(scenario(stopping), timeout=_WAIT_S)

    return asyncio.run(main())


def test_a_free_routine_lane_runs_the_call_there(lanes: Lanes) -> None:
    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        return await lanes.run_routine(thread_name, wakeup=Wakeup(), clock=LeaseClock(), stopping=stopping)

    ran = run_scenario(scenario)
    assert ran is not None
    assert ran.result.startswith("routine") and not ran.promoted


def test_a_wake_up_takes_a_queued_run_to_the_urgent_lane(lanes: Lanes) -> None:
    release = hold(lanes)
    wakeup = Wakeup()
    calls: list[str] = []

    def call() -> str:
        calls.append(thread_name())
        return calls[-1]

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        asyncio.get_running_loop().call_later(0.05, wakeup.poke)
        return await lanes.run_routine(call, wakeup=wakeup, clock=LeaseClock(), stopping=stopping)

    try:
        ran = run_scenario(scenario)
    finally:
        release.set()
    lanes.routine.shutdown(wait=True)
    assert ran is not None and ran.promoted
    assert calls == [ran.result] and ran.result.startswith("urgent")  # ran once, not again when freed
    assert not wakeup.event.is_set()  # the promoted run is the answer to the wake-up


def test_an_expiry_takes_a_queued_run_to_the_urgent_lane(lanes: Lanes) -> None:
    release = hold(lanes)
    clock = LeaseClock()
    # held Lease last seen now, 0.2 s lifetime: it runs out while the run waits in the queue
    clock.observe(MemberId("orders-0"), "v1", time.monotonic(), lifetime=0.2)

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        return await lanes.run_routine(thread_name, wakeup=Wakeup(), clock=clock, stopping=stopping)

    started = time.monotonic()
    try:
        ran = run_scenario(scenario)
    finally:
        release.set()
    assert ran is not None and ran.promoted and ran.result.startswith("urgent")
    assert ran.started >= started + 0.2  # not before the expiry


def test_a_renewal_before_the_expiry_keeps_the_run_in_its_queue(lanes: Lanes) -> None:
    release = hold(lanes)
    clock = LeaseClock()
    member = MemberId("orders-0")

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        # Seen from inside the loop, seconds apart: `make test` runs this niced beside the e2e
        # tests, where starting the loop and its timers may take a few hundred ms (a 0.3 s
        # lifetime seen before `asyncio.run` ran out before the run was even queued, in CI).
        clock.observe(member, "v1", time.monotonic(), lifetime=2.0)
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: clock.hear(member, time.monotonic()))  # expiry moves to 2.2 s
        loop.call_later(1.0, release.set)  # the queue frees up before the new expiry
        return await lanes.run_routine(thread_name, wakeup=Wakeup(), clock=clock, stopping=stopping)

    ran = run_scenario(scenario)
    assert ran is not None and not ran.promoted and ran.result.startswith("routine")


def test_a_wake_up_during_a_started_run_is_left_for_the_next_turn(lanes: Lanes) -> None:
    wakeup = Wakeup()
    running = threading.Event()
    finish = threading.Event()
    calls: list[str] = []

    def call() -> str:
        calls.append(thread_name())
        running.set()
        finish.wait(_WAIT_S)
        return calls[-1]

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        loop = asyncio.get_running_loop()

        async def poke_while_running() -> None:
            await loop.run_in_executor(None, running.wait, _WAIT_S)
            wakeup.poke()
            await asyncio.sleep(0.05)
            finish.set()

        poker = asyncio.ensure_future(poke_while_running())
        ran = await lanes.run_routine(call, wakeup=wakeup, clock=LeaseClock(), stopping=stopping)
        await poker
        return ran

    ran = run_scenario(scenario)
    assert ran is not None and not ran.promoted
    assert calls == [ran.result] and ran.result.startswith("routine")
    assert wakeup.event.is_set()  # re-armed: the loop's next wait ends at once


def test_a_stop_while_queued_never_runs_the_call(lanes: Lanes) -> None:
    release = hold(lanes)
    calls: list[str] = []

    def call() -> str:
        calls.append(thread_name())
        return calls[-1]

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        asyncio.get_running_loop().call_later(0.05, stopping.set_result, None)
        return await lanes.run_routine(call, wakeup=Wakeup(), clock=LeaseClock(), stopping=stopping)

    try:
        ran = run_scenario(scenario)
    finally:
        release.set()
    lanes.routine.shutdown(wait=True)
    assert ran is None and calls == []


def test_a_promoted_run_sees_what_changed_before_the_wake_up(lanes: Lanes) -> None:
    release = hold(lanes)
    wakeup = Wakeup()
    policy = {"spec": "old"}

    def change_and_wake() -> None:
        policy["spec"] = "new"
        wakeup.poke()

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        asyncio.get_running_loop().call_later(0.05, change_and_wake)
        return await lanes.run_routine(
            lambda: policy["spec"], wakeup=wakeup, clock=LeaseClock(), stopping=stopping
        )

    try:
        ran = run_scenario(scenario)
    finally:
        release.set()
    assert ran is not None and ran.promoted and ran.result == "new"


def test_a_late_lag_read_leaves_a_queued_run_in_the_routine_lane(lanes: Lanes) -> None:
    """A lag read that lands after its run stopped waiting is routine news: under a slow source
    every policy's read is late, and promoting each one would fill the lane failover needs."""
    release = hold(lanes)
    wakeup = Wakeup()

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, wakeup.note_lag_landed)
        loop.call_later(0.3, release.set)  # the routine lane frees up well after the read landed
        return await lanes.run_routine(thread_name, wakeup=wakeup, clock=LeaseClock(), stopping=stopping)

    ran = run_scenario(scenario)
    assert ran is not None
    assert ran.result.startswith("routine") and not ran.promoted
    assert wakeup.lag_landed.is_set(), "the loop takes the news for its next routine run"


def test_each_wait_for_a_worker_is_reported_by_lane() -> None:
    """A routine run behind a held worker waits there, is promoted by a wake-up and waits again
    for the urgent lane's worker, also held: both waits are told, each with its own lane."""
    routine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="routine")
    urgent = ThreadPoolExecutor(max_workers=1, thread_name_prefix="urgent")
    waits: list[tuple[str, float]] = []
    causes: list[str] = []

    def waited(lane: str, cause: str, seconds: float) -> None:
        waits.append((lane, seconds))
        causes.append(cause)

    lanes = Lanes(routine=routine, urgent=urgent, waited=waited)
    release_routine = hold(lanes)
    release_urgent = threading.Event()
    urgent.submit(release_urgent.wait, _WAIT_S)
    wakeup = Wakeup()

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str] | None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, wakeup.poke)
        loop.call_later(0.5, release_urgent.set)
        return await lanes.run_routine(thread_name, wakeup=wakeup, clock=LeaseClock(), stopping=stopping)

    try:
        ran = run_scenario(scenario)
    finally:
        release_routine.set()
        release_urgent.set()
        routine.shutdown(wait=True, cancel_futures=True)
        urgent.shutdown(wait=True, cancel_futures=True)
    assert ran is not None and ran.promoted
    assert [lane for lane, _ in waits] == ["routine", "urgent"]
    assert causes == [TICK, WOKEN], "a poke is neither a container's news nor an expiry"
    routine_wait, urgent_wait = (seconds for _, seconds in waits)
    assert 0.15 <= routine_wait < _WAIT_S, "queued until the wake-up"
    assert 0.2 <= urgent_wait < _WAIT_S, "waited for the held urgent worker"


def test_an_urgent_run_on_a_free_worker_reports_a_short_wait(lanes: Lanes) -> None:
    waits: list[tuple[str, float]] = []
    timed = Lanes(
        routine=lanes.routine, urgent=lanes.urgent, waited=lambda lane, cause, s: waits.append((lane, s))
    )

    async def scenario(stopping: asyncio.Future[Any]) -> Ran[str]:
        return await timed.run_urgent(thread_name)

    ran = run_scenario(scenario)
    assert ran.result.startswith("urgent")
    assert len(waits) == 1 and waits[0][0] == "urgent" and 0 <= waits[0][1] < 1.0


def test_a_run_a_container_exit_promoted_starts_before_urgent_runs_queued_earlier() -> None:
    """The urgent lane jammed by plan acknowledgements: a crash's run, promoted out of the routine
    queue by the Pod event, starts first once a worker frees (design §8.3)."""
    routine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="routine")
    urgent = PriorityExecutor(1, thread_name_prefix="urgent")
    started: list[tuple[str, str]] = []
    lanes = Lanes(routine=routine, urgent=urgent, waited=lambda lane, cause, _: started.append((lane, cause)))
    release_routine = hold(lanes)
    release_urgent = threading.Event()
    urgent.submit_at(-1, lambda: release_urgent.wait(_WAIT_S))
    order: list[str] = []
    wakeup = Wakeup()
    exited = {"terminated": {"finishedAt": "2026-11-29T10:00:00Z"}}
    pod = {
        "metadata": {"name": "orders-0", "uid": "u1"},
        "status": {"containerStatuses": [{"name": "consumer", "state": exited}]},
    }

    async def scenario(stopping: asyncio.Future[Any]) -> list[Ran[None] | None]:
        loop = asyncio.get_running_loop()
        acks = [lanes.run_urgent(lambda i=i: order.append(f"ack {i}"), cause=WOKEN) for i in range(3)]
        acks.append(lanes.run_urgent(lambda: order.append("expiry"), cause=EXPIRY))
        acked = [asyncio.ensure_future(ack) for ack in acks]
        await asyncio.sleep(0.1)  # the acknowledgements are queued first
        loop.call_later(0.1, wakeup.note_pod, "orders-0", pod)
        loop.call_later(0.4, release_urgent.set)
        crash = await lanes.run_routine(
            lambda: order.append("crash"), wakeup=wakeup, clock=LeaseClock(), stopping=stopping
        )
        return [crash, *await asyncio.gather(*acked)]

    try:
        ran = run_scenario(scenario)
    finally:
        release_routine.set()
        release_urgent.set()
        routine.shutdown(wait=True, cancel_futures=True)
        urgent.shutdown(wait=True, cancel_futures=True)
    assert ran[0] is not None and ran[0].promoted
    assert order == ["crash", "ack 0", "ack 1", "ack 2", "expiry"], "a container first, then in order"
    assert started == [("routine", TICK), ("urgent", CONTAINER), *[("urgent", WOKEN)] * 3, ("urgent", EXPIRY)]
