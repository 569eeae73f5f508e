"""Which workers run a policy's reconcile: the tick's routine lane or the lane for woken runs.

A routine run (the tick came) waits in the routine lane's queue behind the tick's other runs. If
something the policy must answer at once comes while it still waits there (a wake-up: a Lease
changed, the spec changed; or a held Lease runs out by the policy's clock; a late lag read is not
one, `Wakeup.note_lag_landed`), the
queued run is taken out of the queue and run in the urgent lane instead (docs/design.md §8.3). A
run that already started is left to finish; a wake-up it may have missed is re-armed, and an
expiry after its start is judged by the policy's loop from the start moment it returns.

Everything here runs in the policy loop's event loop, like `Wakeup`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from groupops.controller.priority_pool import PriorityExecutor
from groupops.controller.wakeup import Wakeup, expiry_due, next_wake
from groupops.planner.handoff import LeaseClock

__all__ = ["CONTAINER", "EXPIRY", "TICK", "WOKEN", "Lanes", "Ran", "urgent_cause"]

CONTAINER = "container"
"""An urgent run's cause: a consumer container started or ended (the kubelet's report of a
crash). The urgent lane starts these first (design §8.3)."""
EXPIRY = "expiry"
"""A held Lease ran out by the policy's clock."""
WOKEN = "woken"
"""Any other wake-up: a Lease report (an acknowledgement, a release), the spec, a claim."""
TICK = "tick"
"""A routine run's cause: the tick."""
_PRIORITY = {CONTAINER: 0, EXPIRY: 1, WOKEN: 1}


def urgent_cause(wakeup: Wakeup, *, expired: bool) -> str:
    """Why a run is urgent: a container's news first (taken from `wakeup`), then an expiry."""
    if wakeup.take_container_news():
        return CONTAINER
    return EXPIRY if expired else WOKEN


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ran(Generic[T]):
    """What a run returned, the monotonic moment it started, and whether it was promoted out of
    the routine queue into the urgent lane."""

    result: T
    started: float
    promoted: bool = False


@dataclass(frozen=True, slots=True)
class Lanes:
    """`waited(lane, cause, seconds)` is told how long each run waited for a worker of its lane
    ("routine" or "urgent"; a promoted run counts in both, for each wait)."""

    routine: Executor
    urgent: Executor
    waited: Callable[[str, str, float], None] = field(default=lambda lane, cause, seconds: None)

    async def run_urgent(self, call: Callable[[], T], *, cause: str = WOKEN) -> Ran[T]:
        return await _run_in(self.urgent, call, promoted=False, waited=self.waited, cause=cause)

    async def run_routine(
        self,
        call: Callable[[], T],
        *,
        wakeup: Wakeup,
        clock: LeaseClock,
        stopping: asyncio.Future[Any],
        promoted: Callable[[], T] | None = None,
    ) -> Ran[T] | None:
        """Run `call` in the routine lane, or `promoted` (default `call`) in the urgent lane when
        a wake-up or an expiry comes before it starts. None when `stopping` completed while it was
        still queued (it never ran). One of them runs once, when it starts: it must read what it
        works on then (the policy as it is now), since what woke it may have changed that."""
        queued_at = time.monotonic()
        started_at: list[float] = []

        def timed() -> T:
            started_at.append(time.monotonic())
            self.waited("routine", TICK, started_at[0] - queued_at)
            return call()

        queued = self.routine.submit(timed)
        finished = asyncio.wrap_future(queued)
        while not finished.done():
            now = time.monotonic()
            expiry = next_wake(now=now, next_tick=math.inf, clock=clock, judged_until=queued_at)
            woken = await wakeup.wait_until(expiry, interrupts=(finished, stopping))
            if finished.done():
                if woken:
                    wakeup.poke()  # the run may have read what changed before it changed
                break
            if stopping.done():
                if queued.cancel():
                    return None
                break  # it runs: let it finish
            expired = expiry_due(now=time.monotonic(), clock=clock, judged_until=queued_at)
            if not (woken or expired):
                continue  # the Lease we woke for was renewed meanwhile
            if queued.cancel():
                self.waited("routine", TICK, time.monotonic() - queued_at)
                cause = urgent_cause(wakeup, expired=expired)
                return await _run_in(
                    self.urgent, promoted or call, promoted=True, waited=self.waited, cause=cause
                )
            if woken:
                wakeup.poke()
            break  # it already runs: the loop judges what came after its start
        result = await finished
        return Ran(result, started_at[0])


async def _run_in(
    executor: Executor,
    call: Callable[[], T],
    *,
    promoted: bool,
    waited: Callable[[str, str, float], None],
    cause: str,
) -> Ran[T]:
    submitted = time.monotonic()

    def timed() -> tuple[T, float]:
        started = time.monotonic()
        waited("urgent", cause, started - submitted)
        return call(), started

    if isinstance(executor, PriorityExecutor):
        queued = executor.submit_at(_PRIORITY[cause], timed)
    else:
        queued = executor.submit(timed)
    result, started = await asyncio.wrap_future(queued)
    return Ran(result, started, promoted)
