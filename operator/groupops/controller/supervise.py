"""A task that must not end quietly: when it ends by an exception, say so and call back
(docs/design.md §8.3, "a policy loop that dies is logged and started again").

An asyncio task kept in a registry is never garbage-collected, so asyncio never reports its
exception: a policy's loop that raised would stop reconciling its policy without a word until
something restarted it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["on_crash"]


def on_crash(task: asyncio.Task[Any], crashed: Callable[[BaseException], None]) -> None:
    """Call `crashed(error)` in the task's event loop once `task` ends by raising `error`; a task
    that returns or is cancelled (a loop stopped on purpose) calls nothing."""

    def ended(done: asyncio.Task[Any]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            crashed(error)

    task.add_done_callback(ended)
