"""A thread pool that starts the most urgent of its queued calls first (docs/design.md §8.3, "the
urgent lane starts a container's start or end first").

Why not `ThreadPoolExecutor`: it starts calls in the order they came. When the operator falls
behind, the urgent lane fills with runs that expiries on a late clock and Lease reports woke, and
a crashed replica's run waited behind them for over a minute (benchmarks/RESULTS.md, "Ordering
the urgent lane"). Here each call carries a priority (lower starts first); calls of one priority
start in the order they came.

The routine lane uses the same pool with `defer_while`: while the urgent lane has calls waiting
for a worker, a routine call is not started until it has waited `max_deferral_s` (design §8.3,
"routine runs yield to a waiting urgent run"): the two lanes share one interpreter and two cores,
and sixteen routine runs beside four urgent ones took most of both.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["PriorityExecutor"]

T = TypeVar("T")

_Entry = tuple[int, int, float, Future[Any], Callable[[], Any]]
"""(priority, arrival order, monotonic moment queued, future, call)."""

DEFER_POLL_S = 0.05
"""How often a worker holding back a call looks again whether it still must (`defer_while`)."""


class PriorityExecutor(Executor):
    """`max_workers` threads; `submit_at(priority, fn)` queues `fn` by priority, `submit` at
    `default_priority`. With `defer_while`, no call starts while it answers True, unless the call
    has been queued `max_deferral_s` already."""

    def __init__(
        self,
        max_workers: int,
        *,
        thread_name_prefix: str,
        default_priority: int = 1,
        defer_while: Callable[[], bool] | None = None,
        max_deferral_s: float = 0.0,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        if max_deferral_s < 0:
            raise ValueError(f"max_deferral_s must not be negative, got {max_deferral_s}")
        self._default = default_priority
        self._defer_while = defer_while
        self._max_deferral_s = max_deferral_s
        self._queue: list[_Entry] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._shutdown = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{thread_name_prefix}_{i}", daemon=True)
            for i in range(max_workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit_at(self, priority: int, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._ready:
            if self._shutdown:
                raise RuntimeError("cannot schedule a call after shutdown")
            heapq.heappush(self._queue, (priority, next(self._order), time.monotonic(), future, fn))
            self._ready.notify()
        return future

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_at(self._default, lambda: fn(*args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._shutdown = True
            if cancel_futures:
                for _, _, _, future, _ in self._queue:
                    future.cancel()
                self._queue.clear()
            self._ready.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()

    def backlogged(self) -> bool:
        """Some call waits for a worker (read without the lock: a glance, not a decision)."""
        return bool(self._queue)

    def _deferral_left(self) -> float:
        """Seconds the first queued call must still be held back (0: start it). Under the lock."""
        if self._defer_while is None or self._shutdown or not self._defer_while():
            return 0.0
        return self._max_deferral_s - (time.monotonic() - self._queue[0][2])

    def _work(self) -> None:
        while True:
            with self._ready:
                while True:
                    while not self._queue and not self._shutdown:
                        self._ready.wait()
                    if not self._queue:
                        return  # shut down, and nothing left to run
                    held_back_s = self._deferral_left()
                    if held_back_s <= 0:
                        break
                    self._ready.wait(min(held_back_s, DEFER_POLL_S))
                _, _, _, future, fn = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(result)
