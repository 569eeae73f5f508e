"""The answering process's judgement of the operator's main process before each election renewal
(docs/design.md §8.1, "a starved main process keeps the Lease"): heard while its pulse is fresh,
or while it is late but the main process is using CPU (starved), up to a limit; silent when it
has neither pulsed nor used CPU for the pulse timeout (frozen)."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time

from hypothesis import given
from hypothesis import strategies as st

from groupops.controller.answerer_election import MainProcessWatch, PulseStamp, cpu_ticks

PULSE_TIMEOUT_S = 2.0
STARVED_LIMIT_S = 10.0


class Scene:
    """A main process as the answerer sees it: when it last pulsed and its CPU time, on a clock
    the test moves."""

    def __init__(self, *, readable: bool = True) -> None:
        self.now = 100.0
        self.pulse_at = self.now
        self.ticks = 0
        self.readable = readable
        self.watch = MainProcessWatch(
            lambda: self.pulse_at,
            lambda: self.ticks if self.readable else None,
            pulse_timeout_s=PULSE_TIMEOUT_S,
            starved_limit_s=STARVED_LIMIT_S,
            clock=lambda: self.now,
        )

    def step(self, seconds: float, *, pulses: bool, works: bool) -> str | None:
        """Advance in renewal periods of 1 s, the main process pulsing and working or not; the
        judgement after the last period."""
        silence = None
        for _ in range(int(seconds)):
            self.now += 1.0
            if pulses:
                self.pulse_at = self.now
            if works:
                self.ticks += 7
            silence = self.watch.silence()
        return silence


def test_a_pulsing_main_process_is_heard_whether_it_works_or_idles() -> None:
    scene = Scene()
    assert scene.step(30, pulses=True, works=False) is None
    assert scene.step(30, pulses=True, works=True) is None
    assert not scene.watch.starved


def test_a_frozen_main_process_is_silent_once_the_pulse_timeout_passed() -> None:
    scene = Scene()
    scene.step(5, pulses=True, works=True)
    assert scene.step(1, pulses=False, works=False) is None
    silence = scene.step(1, pulses=False, works=False)
    assert silence is not None and "frozen" in silence, silence


def test_a_starved_main_process_keeps_the_lease_up_to_the_limit_then_not() -> None:
    scene = Scene()
    scene.step(5, pulses=True, works=True)
    assert scene.step(STARVED_LIMIT_S - 1, pulses=False, works=True) is None
    assert scene.watch.starved
    silence = scene.step(1, pulses=False, works=True)
    assert silence is not None and "while using CPU" in silence, silence


def test_a_starved_main_process_that_then_stops_working_is_silent_a_pulse_timeout_later() -> None:
    scene = Scene()
    scene.step(5, pulses=False, works=True)
    assert scene.step(1, pulses=False, works=False) is None  # it worked within the last 2 s
    assert scene.step(1, pulses=False, works=False) is not None


def test_without_its_cpu_time_only_the_pulse_counts() -> None:
    scene = Scene(readable=False)
    assert scene.step(1, pulses=False, works=True) is None
    silence = scene.step(1, pulses=False, works=True)
    assert silence is not None and "silent for 2.0 s" in silence, silence


@given(
    st.lists(
        st.tuples(st.booleans(), st.booleans(), st.booleans()),  # pulses, works, /proc readable
        min_size=1,
        max_size=60,
    )
)
def test_heard_only_on_a_fresh_pulse_or_recent_work_within_the_limit(
    periods: list[tuple[bool, bool, bool]],
) -> None:
    scene = Scene()
    worked_at, seen = scene.now, scene.ticks  # the watch's start counts as work seen
    for pulses, works, readable in periods:
        scene.readable = readable
        scene.now += 1.0
        if pulses:
            scene.pulse_at = scene.now
        if works:
            scene.ticks += 1
        if readable and scene.ticks != seen:  # work done while unreadable is seen when readable
            worked_at, seen = scene.now, scene.ticks
        heard = scene.watch.silence() is None
        silent_for = scene.now - scene.pulse_at
        expected = silent_for < PULSE_TIMEOUT_S or (
            readable and silent_for < STARVED_LIMIT_S and scene.now - worked_at < PULSE_TIMEOUT_S
        )
        assert heard == expected, (periods, scene.now, silent_for, worked_at)


def test_cpu_ticks_move_with_a_busy_process_and_stand_still_for_a_stopped_one() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    stopped = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        stopped.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        busy_before, stopped_before = cpu_ticks(busy.pid), cpu_ticks(stopped.pid)
        time.sleep(0.5)
        busy_after, stopped_after = cpu_ticks(busy.pid), cpu_ticks(stopped.pid)
        assert busy_before is not None and busy_after is not None and busy_after > busy_before
        assert stopped_before is not None and stopped_before > 0 and stopped_after == stopped_before
    finally:
        for process in (busy, stopped):
            process.kill()
            process.wait()
    assert cpu_ticks(busy.pid) is None  # reaped: no /proc entry


def test_the_pulse_stamp_is_shared_with_the_spawned_process_not_copied() -> None:
    context = multiprocessing.get_context("spawn")
    stamp = PulseStamp(context)
    child = context.Process(target=_wait_for_a_beat, args=(stamp, stamp.last()))
    child.start()
    time.sleep(0.2)
    stamp.beat()  # after the child started: it sees this only through the shared memory
    child.join(30)
    assert child.exitcode == 0, "the spawned process never saw the parent's beat"


def _wait_for_a_beat(stamp: PulseStamp, first: float) -> None:
    deadline = time.monotonic() + 20
    while stamp.last() == first:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.01)
    sys.exit(0)
