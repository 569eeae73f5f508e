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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from groupops.lag import LagError, LagSnapshot
from groupops.model import TopicPartition
from groupops.planner.plan_format import PublishedPlan

__all__ = ["LagTake", "PolicyLag", "counts_from_plan", "zero_lag"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LagTake:
    """What a run plans by: `snapshot` (None: nothing known yet), and `error` when the newest
    read failed (the snapshot is then the last good one, or None)."""

    snapshot: LagSnapshot | None
    error: LagError | None
    age_s: float | None


class PolicyLag:
    """The lag reads of one policy (kept in its `PolicyMemory`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._future: Future[LagSnapshot] | None = None
        self._snapshot: LagSnapshot | None = None
        self._read_at: float | None = None
        self._error: LagError | None = None
        self._consumed = True
        self._waiting = False

    def take(
        self,
        read: Callable[[], LagSnapshot],
        *,
        pool: Executor | None,
        wait_s: float,
        on_late_result: Callable[[], None] = lambda: None,
    ) -> LagTake:
        """Start a read unless one is in flight, wait up to `wait_s` for it (without a pool: read
        here), and return the newest outcome."""
        if pool is None:
            self._finish(read)
            return self._latest()
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
        with self._lock:
            if error is None:
                self._snapshot = future.result()
                self._read_at = time.monotonic()
                self._error = None
            elif isinstance(error, LagError):
                self._error = error
            else:  # a bug in a source: report it as a failed read, never lose the loop
                self._error = LagError(f"lag read failed: {type(error).__name__}: {error}")

    def _latest(self) -> LagTake:
        with self._lock:
            age = None if self._read_at is None else time.monotonic() - self._read_at
            return LagTake(snapshot=self._snapshot, error=self._error, age_s=age)


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
