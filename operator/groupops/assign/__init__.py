"""The assignment engine: pure strategies, one module each, a registry by name.

A strategy is a function `assign(group: GroupInput) -> Assignment` that gives every member of
the group an entry (possibly empty), each sorted by (topic, partition), and is deterministic.
Callers: `groupops assign`, the planner, the Spark `plan` and `backtest` jobs.

    >>> from groupops.assign import get_strategy
    >>> assignment = get_strategy("lag")(group)
"""

from __future__ import annotations

from collections.abc import Callable

from groupops.assign import balanced, cooperative_sticky, failover, lag, range_, roundrobin, sticky
from groupops.model import Assignment, GroupInput

__all__ = ["STRATEGY_NAMES", "AssignFunction", "UnknownStrategyError", "get_strategy"]

AssignFunction = Callable[[GroupInput], Assignment]

_REGISTRY: dict[str, AssignFunction] = {
    range_.NAME: range_.assign,
    roundrobin.NAME: roundrobin.assign,
    sticky.NAME: sticky.assign,
    cooperative_sticky.NAME: cooperative_sticky.assign,
    lag.NAME: lag.assign,
    failover.NAME: failover.assign,
    balanced.NAME: balanced.assign,
}

STRATEGY_NAMES: tuple[str, ...] = tuple(_REGISTRY)


class UnknownStrategyError(KeyError):
    """No strategy of that name."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown strategy {self.name!r}: choose one of {', '.join(STRATEGY_NAMES)}"


def get_strategy(name: str) -> AssignFunction:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownStrategyError(name) from None
