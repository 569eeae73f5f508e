"""Errors of the local stack.

DevstackError
├── NotBuiltError   a pinned component is not in the cache yet (`make stack` fetches it)
├── StartError      a server exited or did not become ready in time; carries its log's path
├── StateError      `.dev/state.json` is missing or unreadable (`down` without `up`)
└── DemoError       a step of the demo failed or timed out (devstack/demo.py)
"""

from __future__ import annotations

from pathlib import Path


class DevstackError(Exception):
    """Base of every local-stack failure."""


class NotBuiltError(DevstackError):
    """A component's binary or jars are missing from the cache."""


class StartError(DevstackError):
    """A server did not come up. `log_path` is its log, whose tail ends the message."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


class StateError(DevstackError):
    """The state file of a running stack is missing or unreadable."""


class DemoError(DevstackError):
    """A step of the demo failed (`python -m groupops.devstack demo`); the message names it."""
