"""`free_port` never hands out one port twice in a process: the caller may not have bound the
first yet (two flags of one operator command got the same port from a repeated random draw). Nor
do two processes given different bands (`GROUPOPS_PORT_BAND`, one per test lane): a lane's
operator once found the heartbeat port it was given bound by another lane's."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator

import pytest

from groupops.devstack import process
from tests.lanes import LANES, lane_environment


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


def test_each_lane_draws_from_a_band_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    bands = []
    for lane in LANES:
        monkeypatch.setenv(process.PORT_BAND_VARIABLE, lane_environment(lane)[process.PORT_BAND_VARIABLE])
        low, high = process._port_band(process._LISTEN_PORTS_FROM, process._ephemeral_start())
        drawn = {
            process.free_port(kind) for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM) for _ in range(100)
        }
        assert all(low <= port < high for port in drawn), (
            f"{lane}: {sorted(drawn)[:5]}... outside [{low}, {high})"
        )
        bands.append(range(low, high))
    assert all(a.stop <= b.start for a, b in itertools.pairwise(bands)), f"bands overlap: {bands}"
    assert bands[0].start == process._LISTEN_PORTS_FROM, bands
    assert bands[-1].stop > process._ephemeral_start() - len(LANES), "the last band reaches the range's end"


@pytest.mark.parametrize("band", ["3/3", "-1/3", "1", "a/b", "1/0"])
def test_a_band_that_is_not_k_of_n_is_an_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, band: str
) -> None:
    monkeypatch.setenv(process.PORT_BAND_VARIABLE, band)
    with pytest.raises(ValueError, match=f"GROUPOPS_PORT_BAND must be K/N with 0 <= K < N, got '{band}'"):
        process.free_port()
