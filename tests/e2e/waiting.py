"""One polling helper for every e2e and integration test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["held_for", "wait_for"]


def wait_for(
    what: str,
    probe: Callable[[], Any],
    timeout: float = 90.0,
    interval: float = 0.25,
    *,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll `probe` until it returns something truthy and return that. On timeout, fail naming
    `what`, the last value, and `explain()` (what the stack looked like) when given."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    details = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}{details}")


def held_for(seconds: float, probe: Callable[[], Any]) -> Callable[[], bool]:
    """A probe for `wait_for` that is true once `probe` has been true at every poll for
    `seconds`: for a figure the system writes periodically, a reading older than the period may
    not show what just happened."""
    since: float | None = None

    def held() -> bool:
        nonlocal since
        if not probe():
            since = None
            return False
        now = time.monotonic()
        since = now if since is None else since
        return now - since >= seconds

    return held
