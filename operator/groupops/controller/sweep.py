"""Settled policies are checked in batches, not run one by one (docs/design.md §8.3, "a settled
policy's loop parks, and one sweep checks every parked policy").

A policy whose last full run ended settled (`settled`) parks its loop: the loop no longer ticks,
it sleeps until its `Settled.until` (the resync), a wake-up, a Lease expiry or a call from the
sweep. The sweep takes over the tick's check: every `round_s` it takes the parked policies whose
check is due (one per tick each, so a policy is looked at as often as its tick would have), and
checks them in one call on its own thread, in two passes: the first compares each one's inputs
and starts its lag read, the second waits for the reads (all in flight together, so reads of
one Kafka connection go out as one batch: `lagfleet`) and compares lag and progress. A policy
whose check found nothing changed stays parked until its next check; one whose check found a
change is handed back to its loop with the lag it read, and its loop runs it in full in the
tick's lane.

Why a sweep: a tick of a settled policy used to wake its loop, queue a run in the routine lane
and hop to the lag pool, about 0.6 ms of the main process each even when the run stopped right
after its lag read; at 5,000 policies and a 5 s tick that was more than half a core. A parked
loop costs nothing until something wakes it.

Everything here but the checks themselves runs in the policy loops' event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from groupops.controller.supervise import on_crash

__all__ = ["Changed", "Parked", "SettledSweep"]

log = logging.getLogger(__name__)

Memory = TypeVar("Memory")
Check = TypeVar("Check")
Lag = TypeVar("Lag")


@dataclass(frozen=True, slots=True)
class Changed(Generic[Lag]):
    """A check that found a change: the policy runs in full, on `lag` when the check read one
    (None: an input changed before the read, or the read failed; the run reads itself)."""

    lag: Lag | None


@dataclass(eq=False, slots=True)
class Parked(Generic[Memory, Lag]):
    """A parked policy: how to read its body as last seen, its memory, when its next check is
    due (monotonic), and the future its loop waits on (resolved when a check found a change)."""

    key: tuple[str, str]
    body: Callable[[], Mapping[str, Any]]
    memory: Memory
    next_check: float
    changed: asyncio.Future[Changed[Lag]] = field(repr=False)


class SettledSweep(Generic[Memory, Check, Lag]):
    """The checks of every parked policy. `begin(body, memory)`: the first pass of one check
    (None: it runs in full, nothing started); `finish(check, wait_s)`: the second, waiting at most
    `wait_s` for its read (None: nothing changed; else the lag read). The reads of one round
    share one deadline, `wait_s` after the first pass, so a source that does not answer costs a
    round that long and no more. Both run on `executor`, which should be the sweep's own thread.
    `on_round(checks, cpu_s)` is told after each round with checks how many it made and the CPU
    seconds its thread spent on them (a read on another thread, such as the lag pool, excluded)."""

    def __init__(
        self,
        *,
        tick_s: float,
        executor: Executor,
        begin: Callable[[Mapping[str, Any], Memory], Check | None],
        finish: Callable[[Check, float], Lag | None],
        wait_s: float = 1.0,
        round_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        on_round: Callable[[int, float], None] = lambda checks, cpu_s: None,
    ) -> None:
        self._tick_s = tick_s
        self._executor = executor
        self._begin = begin
        self._finish = finish
        self._wait_s = wait_s
        self._round_s = round_s
        self._clock = clock
        self._on_round = on_round
        self._parked: dict[tuple[str, str], Parked[Memory, Lag]] = {}
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        """Rounds so far, whether any check was due or not."""

    def park(
        self,
        key: tuple[str, str],
        body: Callable[[], Mapping[str, Any]],
        memory: Memory,
        *,
        next_check: float,
    ) -> asyncio.Future[Changed[Lag]]:
        """Park a settled policy; its first check is due at `next_check`. Returns the future its
        loop waits on. Starts the sweep on first use (in the running event loop)."""
        loop = asyncio.get_running_loop()
        changed: asyncio.Future[Changed[Lag]] = loop.create_future()
        parked = Parked(key=key, body=body, memory=memory, next_check=next_check, changed=changed)
        self._parked[key] = parked
        if self._task is None or self._task.done():
            self._start(loop)
        return parked.changed

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run(), name="settled sweep")
        on_crash(self._task, lambda error: self._crashed(loop, error))

    def _crashed(self, loop: asyncio.AbstractEventLoop, error: BaseException) -> None:
        # The parked loops wait on this sweep until their resync: start it again at once.
        log.error("the settled sweep ended by an error; it starts again", exc_info=error)
        self._start(loop)

    def unpark(self, key: tuple[str, str]) -> float | None:
        """The loop of `key` runs something, or stops: its policy is no longer checked (its
        pending check's outcome, if any, is dropped). Returns when its next check was due (None:
        it was not parked), so that a loop that parks again keeps its policy's pace."""
        parked = self._parked.pop(key, None)
        if parked is None:
            return None
        if not parked.changed.done():
            parked.changed.cancel()
        return parked.next_check

    @property
    def parked(self) -> int:
        return len(self._parked)

    async def close(self) -> None:
        for key in list(self._parked):
            self.unpark(key)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._round_s)
            now = self._clock()
            due = [parked for parked in self._parked.values() if parked.next_check <= now]
            if not due:
                self.rounds += 1
                continue
            try:
                outcomes = await loop.run_in_executor(self._executor, self._check_all, due)
            except Exception:  # never lose the sweep: the loops' resync still runs them
                log.exception("settled sweep: checking %d policies failed", len(due))
                outcomes = [Changed(None) for _ in due]
            self.rounds += 1
            after = self._clock()
            for parked, outcome in zip(due, outcomes, strict=True):
                if self._parked.get(parked.key) is not parked:
                    continue  # its loop woke meanwhile and runs it
                if outcome is None:
                    # its next check a tick after this one was due, never in the past
                    parked.next_check = max(parked.next_check + self._tick_s, after)
                    continue
                del self._parked[parked.key]
                parked.changed.set_result(outcome)

    def _check_all(self, due: Sequence[Parked[Memory, Lag]]) -> list[Changed[Lag] | None]:
        """Both passes over `due`, on the sweep's thread. None: nothing changed."""
        started = time.thread_time()
        try:
            return self._both_passes(due)
        finally:
            self._on_round(len(due), time.thread_time() - started)

    def _both_passes(self, due: Sequence[Parked[Memory, Lag]]) -> list[Changed[Lag] | None]:
        begun: list[Check | None] = []
        for parked in due:
            try:
                begun.append(self._begin(parked.body(), parked.memory))
            except Exception:
                log.exception("settled check of %s/%s failed", *parked.key)
                begun.append(None)
        outcomes: list[Changed[Lag] | None] = []
        deadline = self._clock() + self._wait_s
        for parked, check in zip(due, begun, strict=True):
            if check is None:
                outcomes.append(Changed(None))
                continue
            try:
                lag = self._finish(check, max(0.0, deadline - self._clock()))
            except Exception as e:  # a failed read or a bug: the full run finds and reports it
                log.debug("settled check of %s/%s: %s", *parked.key, e)
                outcomes.append(Changed(None))
                continue
            outcomes.append(None if lag is None else Changed(lag))
        return outcomes
