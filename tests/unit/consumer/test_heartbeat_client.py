"""The replica's heartbeat client against a scripted operator on a loopback UDP socket: a dropped
datagram is sent again within the same exchange, a standby's answer leads to the leader, and a
silent address costs only its share of the time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from groupops.consumer.heartbeat import HeartbeatClient
from groupops.planner.liveness import (
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatStatus,
    decode_heartbeat,
    encode_answer,
)

Script = Callable[[Heartbeat, int], HeartbeatAnswer | None]
"""(heartbeat, how many this operator received so far) -> its answer, None to drop it."""


class ScriptedOperator:
    def __init__(self, script: Script) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.1)
        self.received: list[Heartbeat] = []
        self._script = script
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.socket.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, sender = self.socket.recvfrom(2048)
            except TimeoutError:
                continue
            heartbeat = decode_heartbeat(data)
            self.received.append(heartbeat)
            answer = self._script(heartbeat, len(self.received))
            if answer is not None:
                self.socket.sendto(encode_answer(answer), sender)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.socket.close()


@pytest.fixture
def operators() -> Iterator[list[ScriptedOperator]]:
    started: list[ScriptedOperator] = []
    yield started
    for operator in started:
        operator.close()


HEARTBEAT = Heartbeat(namespace="team", lease="orders-w-0", incarnation="p1", seq=0)


def granted(heartbeat: Heartbeat) -> HeartbeatAnswer:
    return HeartbeatAnswer(seq=heartbeat.seq, status=HeartbeatStatus.GRANTED, valid=3.0)


def test_a_dropped_datagram_is_sent_again_and_validity_counts_from_the_one_answered(
    operators: list[ScriptedOperator],
) -> None:
    operator = ScriptedOperator(lambda hb, n: None if n == 1 else granted(hb))
    operators.append(operator)
    client = HeartbeatClient([operator.address])
    sends: list[float] = []

    def on_send() -> float:
        sends.append(time.monotonic())
        return sends[-1]

    result = client.exchange(HEARTBEAT, timeout_s=0.6, on_send=on_send)
    assert result is not None
    answer, sent = result
    assert answer.status is HeartbeatStatus.GRANTED
    assert len(sends) == 2 and sent == sends[1]
    assert [hb.seq for hb in operator.received] == [1, 2]
    client.close()


def test_a_standby_sends_the_replica_to_the_leader_which_it_prefers_from_then_on(
    operators: list[ScriptedOperator],
) -> None:
    leader = ScriptedOperator(lambda hb, n: granted(hb))
    standby = ScriptedOperator(
        lambda hb, n: HeartbeatAnswer(seq=hb.seq, status=HeartbeatStatus.NOT_LEADER, leader=leader.address)
    )
    operators += [leader, standby]
    client = HeartbeatClient([standby.address])
    for _ in range(3):
        result = client.exchange(HEARTBEAT, timeout_s=0.6, on_send=time.monotonic)
        assert result is not None and result[0].status is HeartbeatStatus.GRANTED
    assert len(standby.received) == 1, "after the first redirect the leader is asked first"
    assert len(leader.received) == 3
    client.close()


def test_nobody_answering_returns_none_within_the_budget_and_a_surrender_stops_sending(
    operators: list[ScriptedOperator],
) -> None:
    silent = ScriptedOperator(lambda hb, n: None)
    operators.append(silent)
    client = HeartbeatClient([silent.address])
    started = time.monotonic()
    assert client.exchange(HEARTBEAT, timeout_s=0.4, on_send=time.monotonic) is None
    assert time.monotonic() - started < 0.6
    assert len(silent.received) == 2
    assert client.exchange(HEARTBEAT, timeout_s=0.4, on_send=lambda: None) is None
    time.sleep(0.2)
    assert len(silent.received) == 2, "nothing is sent once the replica surrendered"
    client.close()
