"""`cooperative-sticky`: being written."""

from __future__ import annotations

from groupops.model import Assignment, GroupInput

NAME = "cooperative-sticky"


def assign(group: GroupInput) -> Assignment:
    raise NotImplementedError(NAME)
