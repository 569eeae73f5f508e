"""`sticky`: being written."""

from __future__ import annotations

from groupops.model import Assignment, GroupInput

NAME = "sticky"


def assign(group: GroupInput) -> Assignment:
    raise NotImplementedError(NAME)
