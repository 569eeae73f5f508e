"""The replica's side of heartbeats (docs/design.md §7.5): one datagram to the operator's leader,
one answer back.

Who calls it: `consumer.lease.LeaseKeeper`, once per renewal interval while its Lease report has
not changed. `exchange` returns the answer, or None when no operator answered in time (the keeper
then renews its Lease instead, which keeps the replica alive through an operator outage).

Where to send: the addresses given (the chart's Service, or each operator's address), first the
one that last granted; an answer `not-leader` names the leader, tried next.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from groupops.planner.liveness import (
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatFormatError,
    HeartbeatStatus,
    decode_answer,
    encode_heartbeat,
)

__all__ = ["HeartbeatClient"]

log = logging.getLogger(__name__)

_RESOLVE_EVERY_S = 30.0
"""How long a resolved address is used (a Service's cluster IP rarely changes; a pod IP may)."""

Address = tuple[str, int]


class HeartbeatClient:
    """Not thread-safe: one keeper thread uses it."""

    def __init__(self, addresses: Sequence[str], *, monotonic: Callable[[], float] = time.monotonic) -> None:
        if not addresses:
            raise ValueError("at least one heartbeat address is needed")
        self._addresses = list(addresses)
        self._monotonic = monotonic
        self._preferred: str | None = None
        self._resolved: dict[str, tuple[float, tuple[int, Address]]] = {}
        self._sockets: dict[int, socket.socket] = {}
        self._seq = 0
        self._sent_at: dict[int, float] = {}
        """Send time of each datagram of the current exchange, by seq."""
        self.sent = 0
        self.answered = 0

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def exchange(
        self, heartbeat: Heartbeat, *, timeout_s: float, on_send: Callable[[], float | None]
    ) -> tuple[HeartbeatAnswer, float] | None:
        """Send `heartbeat` and wait up to `timeout_s` in all for a granted or refused answer;
        return it with the send time of the datagram it answers. The client numbers the
        datagrams (`seq`) and sends one more when the first is not answered within half of its
        share of the time: a datagram dropped while the operator was busy must not cost a Lease
        write. `on_send()` is called before every datagram and returns its send time, or None to
        send nothing more (the replica surrendered)."""
        deadline = self._monotonic() + timeout_s
        self._sent_at.clear()  # only answers to this exchange's datagrams count
        order = self._order()
        tried: set[str] = set()
        while order and self._monotonic() < deadline:
            address = order.pop(0)
            if address in tried:
                continue
            tried.add(address)
            per_try = max(0.05, (deadline - self._monotonic()) / max(1, len(order) + 1))
            answer = self._one(address, heartbeat, per_try, on_send)
            if answer is None:
                continue
            if answer.status is HeartbeatStatus.NOT_LEADER:
                if answer.leader and answer.leader not in tried:
                    order.insert(0, answer.leader)
                continue
            self._preferred = address
            return answer, self._sent_at[answer.seq]
        self._preferred = None
        return None

    def _order(self) -> list[str]:
        order = list(self._addresses)
        if self._preferred is not None:
            order.insert(0, self._preferred)
        return order

    def _one(
        self, address: str, heartbeat: Heartbeat, timeout_s: float, on_send: Callable[[], float | None]
    ) -> HeartbeatAnswer | None:
        target = self._resolve(address)
        if target is None:
            return None
        family, sockaddr = target
        sock = self._socket(family)
        deadline = self._monotonic() + timeout_s
        resend_at = self._monotonic() + timeout_s / 2
        sends = 0
        while True:
            if sends < 2 and (sends == 0 or self._monotonic() >= resend_at):
                sent = on_send()
                if sent is None:
                    return None
                self._seq += 1
                self._sent_at[self._seq] = sent
                sends += 1
                try:
                    sock.sendto(encode_heartbeat(replace(heartbeat, seq=self._seq)), sockaddr)
                except OSError as e:
                    log.debug("heartbeat to %s: %s", address, e)
                    return None
                self.sent += 1
            wait_until = resend_at if sends < 2 else deadline
            left = min(wait_until, deadline) - self._monotonic()
            if left <= 0:
                if sends < 2 and self._monotonic() < deadline:
                    continue
                return None
            sock.settimeout(left)
            try:
                data, _ = sock.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError as e:  # e.g. ICMP port unreachable: nobody listens there
                log.debug("heartbeat to %s: %s", address, e)
                return None
            try:
                answer = decode_answer(data)
            except HeartbeatFormatError as e:
                log.warning("an answer from %s is not a heartbeat answer: %s", address, e)
                continue
            if answer.seq in self._sent_at:
                self.answered += 1
                return answer

    def _resolve(self, address: str) -> tuple[int, Address] | None:
        now = self._monotonic()
        known = self._resolved.get(address)
        if known is not None and now - known[0] < _RESOLVE_EVERY_S:
            return known[1]
        host, _, port = address.rpartition(":")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_DGRAM)
        except OSError as e:
            log.warning("cannot resolve heartbeat address %s: %s", address, e)
            return None
        family, _, _, _, sockaddr = infos[0]
        target = (int(family), (str(sockaddr[0]), int(sockaddr[1])))
        self._resolved[address] = (now, target)
        return target

    def _socket(self, family: int) -> socket.socket:
        sock = self._sockets.get(family)
        if sock is None:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sockets[family] = sock
        return sock
