"""The progress watchdog: Kafka's max.poll.interval.ms for our replicas. A replica that keeps
renewing its Lease but makes no progress is judged *stuck*, stops renewing, and exits.

Who calls it: runtime.PlanRuntime and native.NativeRuntime build one `ProgressWatchdog` once the
Lease is held and the Kafka consumer exists. Their main loop calls `beat()` each time it comes
back to poll; the watchdog's own thread takes a `Sample` (what the replica owns, its positions,
the high watermarks from a real broker round trip) every `probe_interval_s`, feeds the pure
judge `ProgressTracker`, and acts on its verdict. The runtime supplies the I/O (`sample`,
`on_stuck`), so both classes run in unit tests without Kafka.

The rule, over `interval` = maxPollIntervalSeconds (`GROUPOPS_MAX_POLL_INTERVAL_SECONDS`), only
while the replica owns partitions (a replica that owns nothing holds nothing up):
  (a) loop: the main loop has not come back to poll for `interval` (a callback or a commit
      blocks);
  (b) progress: for `interval`, every broker answer showed an owned partition with lag (its
      position below the high watermark) and no owned position advanced (nor was a partition
      gained);
  (c) broker: no broker round trip succeeded for `interval` (the replica reaches the API server
      but not Kafka).
An idle topic (no lag) is never stuck, however long it stays idle. (a) and (c) count from the
last moment the replica was seen fine, so they are declared at most `CHECK_S` after the interval
is over; (b) counts from the first answer that showed the lag (or the last advance, if later),
so it is declared up to one sampling period later, never before lag has lasted the interval. A
blocked loop therefore shows as (a), not as the lag it causes.

When stuck, the runtime's `on_stuck` stops the Lease renewals (nothing is accepted or committed
from then on) and returns when the Lease has surely expired; the watchdog then ends the process
with `EXIT_STUCK` through `os._exit`, which works even while the main thread is blocked for good
in a callback. Kubernetes restarts the pod.

Reported to the operator (`ProgressWatchdog.report`, read by the Lease keeper's thread for every
heartbeat, docs/design.md §7.5): seconds since the loop last came back to poll (`poll`), since an
owned position last advanced while the replica had lag (`advance`, only while (b) is counting),
and since the last successful commit (`commit`, once there was one). The operator refuses a
heartbeat whose `poll` or `advance` exceeds the policy's interval: the same rules (a) and (b),
judged a second time where a broken or too lenient watchdog cannot overrule them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from groupops.model import TopicPartition

__all__ = [
    "CHECK_S",
    "EXIT_STUCK",
    "LATEST_VERDICT_S",
    "ProgressReport",
    "ProgressTracker",
    "ProgressWatchdog",
    "Rule",
    "Sample",
    "Stuck",
    "exit_process",
    "probe_interval",
]

log = logging.getLogger(__name__)

EXIT_STUCK = 3
"""Exit code of a replica the watchdog judged stuck (1 and 2 are the CLI's runtime failure and
bad input): Kubernetes restarts the pod, the status shows why it terminated."""

CHECK_S = 0.5
"""How often the watchdog judges between samples."""

PROBE_TIMEOUT_MAX_S = 2.0
"""The longest a broker sample may take; the watchdog does not judge while it waits for one."""

LATEST_VERDICT_S = PROBE_TIMEOUT_MAX_S + CHECK_S
"""How late after the interval this watchdog declares a replica stuck, at worst. The operator's
second judgement waits longer than this (planner.liveness.STUCK_GRACE_S), so a working watchdog
always gives the verdict itself."""

Clock = Callable[[], float]

ProgressReport = Mapping[str, float]
"""{"poll" | "advance" | "commit": seconds since}, rounded, for a heartbeat (module docstring)."""

REPORT_DECIMALS = 1
"""Tenths of a second: enough against intervals of seconds, and a short datagram."""


def probe_interval(interval_s: float) -> float:
    """Seconds between two broker samples: a fifth of the interval, within 1-5 s, so that a few
    answers fall in every interval without loading the broker (one ListOffsets per owned
    partition at worst, fewer as soon as one lags)."""
    return min(5.0, max(1.0, interval_s / 5))


class Rule(StrEnum):
    """Which part of the rule fired (see the module docstring)."""

    LOOP = "loop"
    PROGRESS = "progress"
    BROKER = "broker"
    OPERATOR = "operator"

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Rule.LOOP: "the main loop has not come back to poll (a callback or a commit blocks)",
    Rule.PROGRESS: "owned partitions have lag and no owned position advanced",
    Rule.BROKER: "no broker round trip succeeded",
    Rule.OPERATOR: "the operator refused a heartbeat whose progress exceeds maxPollIntervalSeconds",
}


@dataclass(frozen=True, slots=True)
class Stuck:
    """The verdict: `rule` has held for `for_s` seconds."""

    rule: Rule
    for_s: float

    def __str__(self) -> str:
        return f"{self.rule.description} for {self.for_s:.1f} s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """What the replica looked like at one moment.

    owned: partitions it consumes now. positions: next offset to process, where known (a
    partition without one cannot be judged lagging). high_watermarks: from the broker, for the
    owned partitions it answered for (possibly not all: the sampler may stop at the first one
    that lags, or at a failure). answered: a broker round trip succeeded while taking it.
    """

    owned: frozenset[TopicPartition]
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    high_watermarks: Mapping[TopicPartition, int] = field(default_factory=dict)
    answered: bool = False

    @property
    def lagging(self) -> bool:
        return any(
            tp in self.positions and self.positions[tp] < high
            for tp, high in self.high_watermarks.items()
            if tp in self.owned
        )

    @property
    def complete(self) -> bool:
        """Every owned partition's high watermark is known: a sample without lag then proves
        there is nothing to do."""
        return self.owned <= self.high_watermarks.keys()


class ProgressTracker:
    """The judge: fed in time order (monotonic seconds) from one thread; `verdict` applies the
    rule of the module docstring."""

    def __init__(self, interval_s: float, *, now: float) -> None:
        self.interval_s = interval_s
        self._loop_at = now
        self._contact_at = now
        self._progress_at = now
        self._owning_since: float | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._lagging_since: float | None = None

    def loop_returned(self, at: float) -> None:
        """The main loop came back to poll at `at`."""
        self._loop_at = max(self._loop_at, at)

    def observe(self, at: float, sample: Sample) -> None:
        if sample.answered:
            self._contact_at = max(self._contact_at, at)
        owned = sample.owned
        if not owned:
            self._owning_since = None
            self._owned = owned
            self._positions = {}
            self._lagging_since = None
            return
        if self._owning_since is None:
            self._owning_since = at
            self._progress_at = at
        gained = not owned <= self._owned
        advanced = any(
            tp in self._positions and position > self._positions[tp]
            for tp, position in sample.positions.items()
            if tp in owned
        )
        self._owned = owned
        self._positions = {tp: position for tp, position in sample.positions.items() if tp in owned}
        if gained or advanced:
            self._progress_at = at
        if sample.lagging:
            if self._lagging_since is None:
                self._lagging_since = at
        elif sample.complete:
            self._lagging_since = None
        # Otherwise the answer was partial and showed no lag: it proves nothing either way.

    def verdict(self, now: float) -> Stuck | None:
        """The first rule that has held for the interval (loop, broker, progress), else None."""
        if self._owning_since is None:
            return None
        since = self._owning_since
        starts = (
            (Rule.LOOP, max(self._loop_at, since)),
            (Rule.BROKER, max(self._contact_at, since)),
            (
                Rule.PROGRESS,
                None if self._lagging_since is None else max(self._lagging_since, self._progress_at, since),
            ),
        )
        for rule, start in starts:
            if start is not None and now - start >= self.interval_s:
                return Stuck(rule, now - start)
        return None

    def report(self, now: float, *, committed_at: float | None = None) -> dict[str, float]:
        """What a heartbeat carries (module docstring): `poll` always, `advance` only while owned
        partitions lag (counted from where rule (b) counts), `commit` once `committed_at` is
        known. Rounded to tenths, never negative."""
        report = {"poll": now - self._loop_at}
        if self._owning_since is not None and self._lagging_since is not None:
            report["advance"] = now - max(self._lagging_since, self._progress_at, self._owning_since)
        if committed_at is not None:
            report["commit"] = now - committed_at
        return {name: round(max(0.0, value), REPORT_DECIMALS) for name, value in report.items()}


def exit_process(code: int) -> None:
    """`os._exit` after flushing the log handlers and standard streams: the main thread may be
    blocked for good in a callback, so neither `sys.exit` nor atexit handlers could run. (The
    journal writes each line unbuffered; it has nothing to flush.)"""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class ProgressWatchdog:
    """The thread that samples, judges and, once the replica is stuck, ends the process.

    sample(timeout_s): the runtime's `Sample`, each broker call bounded by `timeout_s`. It runs in
    the watchdog's thread, so it must never wait on the main thread: not on the runtime's Kafka
    consumer either (confluent-kafka lets one thread at a time into a Consumer).
    on_stuck(stuck): the runtime's reaction (stop renewing, stop accepting, log, count); returns
    the monotonic time at which to exit. `exit_with` and `monotonic` are replaced in tests.
    """

    def __init__(
        self,
        interval_s: float,
        *,
        sample: Callable[[float], Sample],
        on_stuck: Callable[[Stuck], float],
        exit_with: Callable[[int], None] = exit_process,
        monotonic: Clock = time.monotonic,
        probe_interval_s: float | None = None,
        check_s: float = CHECK_S,
    ) -> None:
        self.interval_s = interval_s
        self.probe_interval_s = probe_interval(interval_s) if probe_interval_s is None else probe_interval_s
        self.probe_timeout_s = min(PROBE_TIMEOUT_MAX_S, self.probe_interval_s)
        self._sample = sample
        self._on_stuck = on_stuck
        self._exit = exit_with
        self._monotonic = monotonic
        self._check_s = check_s
        self._tracker = ProgressTracker(interval_s, now=monotonic())
        self._lock = threading.Lock()
        """Guards `_tracker`: fed by this watchdog's thread, read by the Lease keeper's (`report`)."""
        self._beat_at = monotonic()
        self._external: Stuck | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stuck: Stuck | None = None
        """Set (once) when the replica was judged stuck; the runtime checks it before it accepts
        or commits anything."""

    def beat(self) -> None:
        """The main loop is back to poll (called from the main thread: one float store)."""
        self._beat_at = self._monotonic()

    def report(self, *, committed_at: float | None = None) -> ProgressReport:
        """The progress a heartbeat carries now (any thread; see the module docstring);
        `committed_at`: the monotonic time of the last successful commit, if any."""
        with self._lock:
            self._tracker.loop_returned(self._beat_at)
            return self._tracker.report(self._monotonic(), committed_at=committed_at)

    def judged_stuck(self, stuck: Stuck) -> None:
        """Someone else (the operator, through the Lease keeper) judged the replica stuck: this
        watchdog declares it at its next check, as if its own rule had fired (any thread)."""
        self._external = stuck

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="progress-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stop judging and cancel a pending exit; waits for a sample in progress, so the runtime
        may close what the sampler uses afterwards. False when the thread did not end in time."""
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout=self.probe_timeout_s * 3 + 1)
        return not thread.is_alive()

    def _run(self) -> None:
        next_sample = self._monotonic()
        while not self._stop.is_set():
            if self._monotonic() >= next_sample:
                sample = self._take_sample()
                if sample is not None:
                    with self._lock:
                        self._tracker.observe(self._monotonic(), sample)
                next_sample = self._monotonic() + self.probe_interval_s
            with self._lock:
                self._tracker.loop_returned(self._beat_at)
                verdict = self._external or self._tracker.verdict(self._monotonic())
            if verdict is not None:
                self._declare(verdict)
                return
            self._stop.wait(self._check_s)

    def _take_sample(self) -> Sample | None:
        try:
            return self._sample(self.probe_timeout_s)
        except Exception:
            # A sampler bug must not silently switch the watchdog off: it counts as no answer, so
            # a replica seen owning partitions whose sampler keeps failing is judged stuck (c).
            log.exception("sampling progress failed")
            return None

    def _declare(self, stuck: Stuck) -> None:
        self.stuck = stuck
        try:
            exit_at = self._on_stuck(stuck)
        except Exception:
            # The runtime could not stop cleanly: exiting at once is the safe way out.
            log.exception("reacting to a stuck replica failed; exiting at once")
            exit_at = self._monotonic()
        if self._stop.wait(max(0.0, exit_at - self._monotonic())):
            return
        log.error("exiting with code %d: stuck (%s)", EXIT_STUCK, stuck)
        self._exit(EXIT_STUCK)
