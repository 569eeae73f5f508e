"""`free_port` never hands out one port twice in a process: the caller may not have bound the
first yet (two flags of one operator command got the same port from a repeated random draw)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from groupops.devstack import process


def test_a_repeated_draw_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: Iterator[int] = iter([23456, 23456, 23456, 23457, 23456])
    monkeypatch.setattr(process.random, "randrange", lambda low, high: next(draws))
    monkeypatch.setattr(process, "_GIVEN", {socket.SOCK_STREAM: set(), socket.SOCK_DGRAM: set()})
    first = process.free_port()
    second = process.free_port()
    assert (first, second) == (23456, 23457)
    assert process.free_port(socket.SOCK_DGRAM) == 23456, "UDP and TCP ports are apart"


def test_many_draws_are_all_different() -> None:
    ports = [process.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
