"""One policy's lag, read off the reconcile's path: failover, drains and rollouts never wait on
a lag source.

Who calls it: `reconcile`'s lag step, once per run, through `PolicyLag.take`. Reads run on the
operator's lag pool, one at a time per policy (single flight). A run waits for the read it
started for at most `wait_s` (a healthy source answers in milliseconds, so the plan uses fresh
lag as before); a read that takes longer finishes in the background and wakes the policy's loop
when it lands. Until a read succeeds again the run plans on what is known, best first
(docs/design.md §8):

1. the last successful read (its age is reported);
2. partition counts from the Kafka cluster's metadata, every lag 0 (not tried when the policy's
   source is `kafka` itself: it just failed to reach the same brokers);
3. partition counts from the published plan (the highest partition of each topic it names);

and the policy is `Degraded` with the source's error as the reason. With none of them (a new
policy whose source is down) the run fails as before: nothing is planned from nothing.

Every successful read that carries offsets (the `kafka` source) also advances the policy's
windows (`planner.lagwindow`): each partition's recent log end offsets, for its time lag, and its
commit history, for Burrow's stuck rules (`planner.stuck`). They advance where the read lands, so
every read counts, however many runs see it; a take hands the windows of the snapshot it returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from groupops.lag import LagError, LagSnapshot, lag_from_offsets
from groupops.model import TopicPartition
from groupops.planner.lagwindow import DEFAULT_LIMITS, PartitionWindow, Sample, WindowLimits, advance
from groupops.planner.plan_format import PublishedPlan

__all__ = ["LagTake", "PolicyLag", "Windows", "counts_from_plan", "samples_of", "zero_lag"]

Windows = Mapping[TopicPartition, PartitionWindow]
"""Every partition's window after a read (`planner.lagwindow`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagTake:
    """What a run plans by: `snapshot` (None: nothing known yet), and `error` when the newest
    read failed (the snapshot is then the last good one, or None)."""

    snapshot: LagSnapshot | None
    error: LagError | None
    age_s: float | None
    windows: Windows | None = None
    """The windows as of `snapshot` (None: its source gives no offsets, or nothing read yet)."""


class PolicyLag:
    """The lag reads of one policy (kept in its `PolicyMemory`)."""

    def __init__(self, limits: WindowLimits = DEFAULT_LIMITS) -> None:
        self._lock = threading.Lock()
        self._future: Future[LagSnapshot] | None = None
        self._snapshot: LagSnapshot | None = None
        self._read_at: float | None = None
        self._error: LagError | None = None
        self._consumed = True
        self._waiting = False
        self._limits = limits
        self._windows: dict[TopicPartition, PartitionWindow] = {}
        self._windows_of: LagSnapshot | None = None
        self._auto_offset_reset = "latest"

    def take(
        self,
        read: Callable[[], LagSnapshot],
        *,
        pool: Executor | None,
        wait_s: float,
        on_late_result: Callable[[], None] = lambda: None,
        auto_offset_reset: str = "latest",
    ) -> LagTake:
        """Start a read unless one is in flight, wait up to `wait_s` for it (without a pool: read
        here), and return the newest outcome. `auto_offset_reset`: the policy's, for where a
        group without a commit starts (`samples_of`)."""
        started = self.start(
            read, pool=pool, on_late_result=on_late_result, auto_offset_reset=auto_offset_reset
        )
        return self.wait(started, wait_s=wait_s)

    def start(
        self,
        read: Callable[[], LagSnapshot],
        *,
        pool: Executor | None,
        on_late_result: Callable[[], None] = lambda: None,
        auto_offset_reset: str = "latest",
    ) -> Future[LagSnapshot] | None:
        """The first half of `take`: start a read unless one is in flight and return it, with
        someone now waiting for it (its landing wakes nobody until `wait` says it was late).
        Without a pool the read runs here and None is returned."""
        with self._lock:
            self._auto_offset_reset = auto_offset_reset
        if pool is None:
            self._finish(read)
            return None
        with self._lock:
            future = self._future
            started = future is None
            if future is None:
                future = pool.submit(read)
                self._future = future
                self._consumed = False
            self._waiting = True
        if started:  # outside the lock: a future already done runs the callback right here
            future.add_done_callback(lambda done: self._landed(done, on_late_result))
        return future

    def wait(self, future: Future[LagSnapshot] | None, *, wait_s: float) -> LagTake:
        """The second half of `take`: wait up to `wait_s` for the read `start` returned, and
        return the newest outcome."""
        if future is None:
            return self._latest()
        try:
            future.result(timeout=wait_s)
        except (FutureTimeout, CancelledError):
            pass  # still running, or the operator is stopping (its pool cancels queued reads)
        except LagError:
            pass  # recorded by _landed
        with self._lock:
            self._waiting = False
            if future.done():
                self._consumed = True
        return self._latest()

    def _landed(self, future: Future[LagSnapshot], on_late_result: Callable[[], None]) -> None:
        self._record(future)
        with self._lock:
            if self._future is future:
                self._future = None
            late = not self._consumed and not self._waiting
        if late:
            on_late_result()

    def _finish(self, read: Callable[[], LagSnapshot]) -> None:
        future: Future[LagSnapshot] = Future()
        try:
            future.set_result(read())
        except LagError as e:
            future.set_exception(e)
        self._record(future)

    def _record(self, future: Future[LagSnapshot]) -> None:
        if future.cancelled():  # the operator is stopping: nothing was read
            return
        error = future.exception()
        windows = None
        if error is None:  # one read in flight per policy: windows advance one read at a time
            windows = self._advanced(future.result())
        with self._lock:
            if error is None:
                self._snapshot = future.result()
                self._read_at = time.monotonic()
                self._error = None
                if windows is not None:
                    self._windows, self._windows_of = windows, self._snapshot
            elif isinstance(error, LagError):
                self._error = error
            else:  # a bug in a source: report it as a failed read, never lose the loop
                self._error = LagError(f"lag read failed: {type(error).__name__}: {error}")

    def _advanced(self, snapshot: LagSnapshot) -> dict[TopicPartition, PartitionWindow] | None:
        with self._lock:
            reset, windows = self._auto_offset_reset, self._windows
        samples = samples_of(snapshot, reset)
        return None if samples is None else advance(windows, samples, self._limits)

    def _latest(self) -> LagTake:
        with self._lock:
            age = None if self._read_at is None else time.monotonic() - self._read_at
            known = self._windows_of is not None and self._windows_of is self._snapshot
            windows = self._windows if known else None
            return LagTake(snapshot=self._snapshot, error=self._error, age_s=age, windows=windows)


def samples_of(snapshot: LagSnapshot, auto_offset_reset: str) -> dict[TopicPartition, Sample] | None:
    """One sample per partition of a read with offsets (None without: only the `kafka` source
    has them). The group's position is its committed offset; without one, where a consumer
    starts: the log start (`earliest`, as the pipeline counts it) or the log end (`latest`, whose
    lag is 0, docs/design.md §4)."""
    if snapshot.offsets is None:
        return None
    samples: dict[TopicPartition, Sample] = {}
    for tp, offsets in snapshot.offsets.items():
        if offsets.committed is not None:
            consumed = offsets.committed
        else:
            consumed = offsets.log_end if auto_offset_reset == "latest" else offsets.log_start
        samples[tp] = Sample(
            t=snapshot.taken_at,
            log_end=offsets.log_end,
            consumed=consumed,
            lag=lag_from_offsets(offsets, auto_offset_reset),
        )
    return samples


def zero_lag(group_id: str, counts: Mapping[str, int]) -> LagSnapshot:
    """A snapshot that knows partition counts and nothing else."""
    return LagSnapshot(group_id=group_id, taken_at=time.time(), lags={t: [0] * n for t, n in counts.items()})


def counts_from_plan(plan: PublishedPlan, topics: Sequence[str]) -> dict[str, int] | None:
    """Partition counts as far as the plan shows them (None when it names no partition of some
    topic): the highest partition it names of each topic, plus one."""
    named: list[TopicPartition] = [tp for tps in plan.plan.assignment.values() for tp in tps]
    named.extend(plan.releasing)
    highest: dict[str, int] = {}
    for tp in named:
        highest[tp.topic] = max(highest.get(tp.topic, -1), tp.partition)
    if any(topic not in highest for topic in topics):
        return None
    return {topic: highest[topic] + 1 for topic in topics}
