"""`balanced`: being written."""

from __future__ import annotations

from groupops.model import Assignment, GroupInput

NAME = "balanced"


def assign(group: GroupInput) -> Assignment:
    raise NotImplementedError(NAME)
