"""The settled sweep (controller/sweep.py): a parked policy is checked once per tick, a change is
handed back to its loop with the lag read, a loop that wakes drops the check in flight, and one
round's reads share one deadline. The checks are plain functions here; the real ones
(`reconcile.begin_settled_check` / `finish_settled_check`) run in tests/e2e/test_settled_policy.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from groupops.controller.sweep import Changed, SettledSweep

TICK_S = 5.0
ROUND_S = 0.01


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Memory:
    """What the checks of one fake policy find: `lag` None means nothing changed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lag: str | None = None
        self.begin_returns_none = False
        self.finish_raises = False
        self.begun = 0
        self.finished = 0
        self.hold: threading.Event | None = None  # a finish that waits for the test


def make_sweep(
    clock: Clock, *, wait_s: float = 1.0, finish_waits: list[float] | None = None, pool: ThreadPoolExecutor
) -> SettledSweep[Memory, Memory, str]:
    def begin(body: Mapping[str, Any], memory: Memory) -> Memory | None:
        assert body["metadata"]["name"] == memory.name
        memory.begun += 1
        return None if memory.begin_returns_none else memory

    def finish(check: Memory, wait_s: float) -> str | None:
        if finish_waits is not None:
            finish_waits.append(wait_s)
            clock.now += 0.4  # each read takes 0.4 s of the round's deadline
        if check.hold is not None:
            check.hold.wait(5)
        check.finished += 1
        if check.finish_raises:
            raise RuntimeError("the source broke")
        return check.lag

    return SettledSweep(
        tick_s=TICK_S, executor=pool, begin=begin, finish=finish, wait_s=wait_s, round_s=ROUND_S, clock=clock
    )


def body_of(name: str) -> Callable[[], Mapping[str, Any]]:
    return lambda: {"metadata": {"name": name}}


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(ROUND_S)


async def rounds(sweep: SettledSweep[Any, Any, Any], n: int) -> None:
    """Wait until the sweep has looked `n` more times at its parked policies."""
    start = sweep.rounds
    await until(lambda: sweep.rounds >= start + n)


def play(
    pool: ThreadPoolExecutor,
    scenario: Callable[[Clock, SettledSweep[Memory, Memory, str]], Awaitable[None]],
    *,
    finish_waits: list[float] | None = None,
) -> None:
    """Run `scenario` against a fresh sweep on a hand-moved clock, and close the sweep."""

    async def main() -> None:
        clock = Clock()
        sweep = make_sweep(clock, finish_waits=finish_waits, pool=pool)
        try:
            await scenario(clock, sweep)
        finally:
            await sweep.close()

    asyncio.run(main())


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


def test_a_parked_policy_is_checked_once_per_tick_and_stays_parked_while_nothing_changes(
    pool: ThreadPoolExecutor,
) -> None:
    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        memory = Memory("a")
        changed = sweep.park(("ns", "a"), body_of("a"), memory, next_check=clock.now + TICK_S)
        await rounds(sweep, 3)
        assert memory.begun == 0  # not due yet

        clock.now += TICK_S
        await until(lambda: memory.finished == 1)
        await rounds(sweep, 3)
        assert (memory.begun, memory.finished) == (1, 1)  # one check per tick, however many rounds

        clock.now += TICK_S
        await until(lambda: memory.finished == 2)
        assert not changed.done() and sweep.parked == 1
        # a loop woken for nothing (a Lease renewed before it ran out) parks again at this pace
        assert sweep.unpark(("ns", "a")) == pytest.approx(100.0 + 3 * TICK_S)
        assert changed.cancelled() and sweep.parked == 0

    play(pool, scenario)


def test_a_change_is_handed_to_the_loop_with_the_lag_it_read_and_the_policy_is_no_longer_checked(
    pool: ThreadPoolExecutor,
) -> None:
    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        quiet, busy = Memory("quiet"), Memory("busy")
        busy.lag = "new lag"
        quiet_changed = sweep.park(("ns", "quiet"), body_of("quiet"), quiet, next_check=clock.now)
        busy_changed = sweep.park(("ns", "busy"), body_of("busy"), busy, next_check=clock.now)
        assert await asyncio.wait_for(busy_changed, 5) == Changed("new lag")
        assert sweep.parked == 1 and not quiet_changed.done()
        clock.now += TICK_S
        await until(lambda: quiet.finished == 2)
        assert busy.finished == 1  # handed back: its loop runs it now

    play(pool, scenario)


@pytest.mark.parametrize("failure", ["begin_returns_none", "finish_raises"])
def test_an_input_changed_or_a_failed_check_runs_the_policy_in_full_without_a_lag(
    pool: ThreadPoolExecutor, failure: str
) -> None:
    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        broken, healthy = Memory("broken"), Memory("healthy")
        setattr(broken, failure, True)
        changed = sweep.park(("ns", "broken"), body_of("broken"), broken, next_check=clock.now)
        sweep.park(("ns", "healthy"), body_of("healthy"), healthy, next_check=clock.now)
        assert await asyncio.wait_for(changed, 5) == Changed(None)
        assert broken.finished == (1 if failure == "finish_raises" else 0)
        await until(lambda: healthy.finished == 1)  # the round went on for the others
        clock.now += TICK_S
        await until(lambda: healthy.finished == 2)  # and the sweep after it

    play(pool, scenario)


def test_a_loop_that_wakes_during_a_check_drops_the_check_and_is_not_told_about_it(
    pool: ThreadPoolExecutor,
) -> None:
    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        memory = Memory("a")
        memory.lag = "changed meanwhile"
        memory.hold = threading.Event()
        first = sweep.park(("ns", "a"), body_of("a"), memory, next_check=clock.now)
        await until(lambda: memory.begun == 1)
        sweep.unpark(("ns", "a"))  # a Lease woke the loop: it runs the policy itself
        assert first.cancelled()
        second = sweep.park(("ns", "a"), body_of("a"), memory, next_check=clock.now + TICK_S)
        memory.hold.set()
        await until(lambda: memory.finished == 1)
        await rounds(sweep, 3)
        assert not second.done() and sweep.parked == 1  # the old check's outcome went nowhere

    play(pool, scenario)


def test_the_reads_of_one_round_share_one_deadline(pool: ThreadPoolExecutor) -> None:
    waits: list[float] = []

    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        memories = [Memory(f"p{i}") for i in range(4)]
        for memory in memories:
            sweep.park(("ns", memory.name), body_of(memory.name), memory, next_check=clock.now)
        await until(lambda: all(memory.finished == 1 for memory in memories))
        assert waits == pytest.approx([1.0, 0.6, 0.2, 0.0])

    play(pool, scenario, finish_waits=waits)


def test_a_policy_parked_again_is_checked_on_its_new_schedule_only(pool: ThreadPoolExecutor) -> None:
    """The sweep keeps its due checks in time order; the entry a policy left when its loop woke
    must not check it a second time."""

    async def scenario(clock: Clock, sweep: SettledSweep[Memory, Memory, str]) -> None:
        early, late = Memory("early"), Memory("late")
        sweep.park(("ns", "late"), body_of("late"), late, next_check=clock.now + 3 * TICK_S)
        sweep.park(("ns", "early"), body_of("early"), early, next_check=clock.now + TICK_S)
        sweep.unpark(("ns", "early"))  # its loop woke, ran, and parks again later
        sweep.park(("ns", "early"), body_of("early"), early, next_check=clock.now + 2 * TICK_S)

        clock.now += TICK_S
        await rounds(sweep, 3)
        assert (early.begun, late.begun) == (0, 0), "the first parking's check is gone"

        clock.now += TICK_S
        await until(lambda: early.finished == 1)
        await rounds(sweep, 3)
        assert (early.begun, late.begun) == (1, 0)

        clock.now += TICK_S
        await until(lambda: late.finished == 1 and early.finished == 2)
        await rounds(sweep, 3)
        assert (early.begun, late.begun) == (2, 1), "each checked once for this tick"
        assert sweep.parked == 2

    play(pool, scenario)


class BrokenOnce(Clock):
    """A clock that raises at its `breaks_at`-th reading: a bug in the sweep's own loop, outside
    the checks' error handling."""

    def __init__(self, breaks_at: int) -> None:
        super().__init__()
        self.readings = 0
        self.breaks_at = breaks_at

    def __call__(self) -> float:
        self.readings += 1
        if self.readings == self.breaks_at:
            raise RuntimeError("a bug in the sweep")
        return self.now


def test_a_sweep_that_ends_by_an_error_is_logged_and_starts_again(
    pool: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        clock = BrokenOnce(breaks_at=2)
        sweep = make_sweep(clock, pool=pool)
        try:
            memory = Memory("a")
            changed = sweep.park(("ns", "a"), body_of("a"), memory, next_check=clock.now + TICK_S)
            await until(lambda: clock.readings > 2)  # it broke, and a sweep reads the clock again
            memory.lag = "moved"
            clock.now += TICK_S
            outcome = await asyncio.wait_for(changed, 5)
            assert outcome.lag == "moved"
        finally:
            await sweep.close()

    asyncio.run(main())
    crashes = [r for r in caplog.records if "settled sweep ended by an error" in r.getMessage()]
    assert len(crashes) == 1
    assert crashes[0].exc_info is not None and str(crashes[0].exc_info[1]) == "a bug in the sweep"


def test_a_round_with_checks_reports_how_many_and_the_cpu_its_thread_spent(pool: ThreadPoolExecutor) -> None:
    told: list[tuple[int, float]] = []

    def busy_begin(body: Mapping[str, Any], memory: Memory) -> Memory:
        spent = time.thread_time()
        while time.thread_time() - spent < 0.02:  # CPU the check spends on the sweep's thread
            pass
        return memory

    async def main() -> None:
        clock = Clock()
        sweep: SettledSweep[Memory, Memory, str] = SettledSweep(
            tick_s=TICK_S,
            executor=pool,
            begin=busy_begin,
            finish=lambda check, wait_s: None,
            round_s=ROUND_S,
            clock=clock,
            on_round=lambda checks, cpu_s: told.append((checks, cpu_s)),
        )
        try:
            for name in ("a", "b"):
                sweep.park(("ns", name), body_of(name), Memory(name), next_check=clock.now + TICK_S)
            await rounds(sweep, 2)
            assert told == []  # rounds without a due check report nothing
            clock.now += TICK_S
            await until(lambda: bool(told))
        finally:
            await sweep.close()

    asyncio.run(main())
    (checks, cpu_s), *_ = told
    assert checks == 2
    assert cpu_s >= 0.04
