"""`static` lag source: the numbers written in the policy (`lagSource.static.lags`).

For GitOps tests, demos and dry runs: no cluster is asked anything. The lags also give the
partition count of each topic (one lag per partition), so a topic of the policy that the static
lags do not list is reported as an unknown topic, as the Kafka source would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from groupops.lag.base import LagSnapshot, LagSourceConfigError, UnknownTopicError

__all__ = ["StaticLagSource", "from_spec"]

TYPE = "static"


class StaticLagSource:
    """Returns the configured lags; `read` raises UnknownTopicError for a topic not configured."""

    def __init__(self, lags: Mapping[str, Sequence[int]]) -> None:
        self._lags = {topic: tuple(values) for topic, values in lags.items()}

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        missing = [topic for topic in topics if topic not in self._lags]
        if missing:
            raise UnknownTopicError(f"topic {missing[0]!r} has no entry in lagSource.static.lags")
        return LagSnapshot(
            group_id=group_id, taken_at=time.time(), lags={topic: self._lags[topic] for topic in topics}
        )

    def close(self) -> None:
        """Nothing to release."""


def from_spec(spec: Mapping[str, Any], context: object = None) -> StaticLagSource:
    """Build from `{lags: {topic: [lag per partition]}}`; raise LagSourceConfigError naming the field."""
    del context
    lags = spec.get("lags")
    if not isinstance(lags, Mapping) or not lags:
        raise LagSourceConfigError(
            "lagSource.static.lags: give at least one topic with its lag per partition"
        )
    parsed: dict[str, tuple[int, ...]] = {}
    for topic, values in lags.items():
        if not isinstance(values, Sequence) or isinstance(values, str) or not values:
            raise LagSourceConfigError(f"lagSource.static.lags.{topic}: expected a non-empty list of lags")
        for index, value in enumerate(values):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LagSourceConfigError(
                    f"lagSource.static.lags.{topic}[{index}]: expected a non-negative integer, got {value!r}"
                )
        parsed[str(topic)] = tuple(values)
    return StaticLagSource(parsed)
