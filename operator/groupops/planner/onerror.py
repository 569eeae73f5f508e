"""The rules of `spec.consumers.onError` that the policy check and the replicas share (docs/design.md
§9.2): the actions, the bounds, and the doubling backoff. Pure."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["BACKOFF_MAX_S", "MAX_RETRIES", "ErrorAction", "backoff_s", "total_backoff_s"]

BACKOFF_MAX_S = 30.0
MAX_RETRIES = 100


class ErrorAction(StrEnum):
    STOP = "stop"
    SKIP = "skip"
    DEAD_LETTER = "deadLetter"


def backoff_s(first_s: float, retry: int) -> float:
    """The wait before retry number `retry` (1-based): doubling from `first_s`, at most 30 s."""
    return min(BACKOFF_MAX_S, first_s * float(2 ** (retry - 1)))


def total_backoff_s(first_s: float, retries: int) -> float:
    """What all the retries wait together."""
    return sum(backoff_s(first_s, retry) for retry in range(1, retries + 1))
