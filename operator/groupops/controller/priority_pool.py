"""A thread pool that starts the most urgent of its queued calls first (docs/design.md §8.3, "the
urgent lane starts a container's start or end first").

Why not `ThreadPoolExecutor`: it starts calls in the order they came. When the operator falls
behind, the urgent lane fills with runs that expiries on a late clock and Lease reports woke, and
a crashed replica's run waited behind them for over a minute (benchmarks/RESULTS.md, "Ordering
the urgent lane"). Here each call carries a priority (lower starts first); calls of one priority
start in the order they came.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["PriorityExecutor"]

T = TypeVar("T")

_Entry = tuple[int, int, Future[Any], Callable[[], Any]]


class PriorityExecutor(Executor):
    """`max_workers` threads; `submit_at(priority, fn)` queues `fn` by priority, `submit` at
    `default_priority`."""

    def __init__(self, max_workers: int, *, thread_name_prefix: str, default_priority: int = 1) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._default = default_priority
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
            heapq.heappush(self._queue, (priority, next(self._order), future, fn))
            self._ready.notify()
        return future

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_at(self._default, lambda: fn(*args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._shutdown = True
            if cancel_futures:
                for _, _, future, _ in self._queue:
                    future.cancel()
                self._queue.clear()
            self._ready.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._shutdown:
                    self._ready.wait()
                if not self._queue:
                    return  # shut down, and nothing left to run
                _, _, future, fn = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(result)
