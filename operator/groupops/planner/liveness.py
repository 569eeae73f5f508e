"""Heartbeats: how a consumer replica proves it is alive without writing to the API server
(docs/design.md §7.5).

Pure: the datagram format both sides speak, and the rule by which the operator grants one. The
transport is UDP (`controller.heartbeats` serves it, `consumer.heartbeat` sends it): one small
datagram each way per interval, no connection state per replica; a lost datagram only costs the
replica one interval of validity, and it falls back to renewing its Lease.

Request (JSON object, at most `MAX_DATAGRAM` bytes):
    v           1
    namespace   the policy's namespace
    lease       the replica's Lease name
    incarnation the process (must be the Lease's `groupops.dev/incarnation`)
    seq         increasing per process; the answer echoes it
    seen        optional: the newest plan epoch the replica has seen (plan delivery); a replica
                that has not seen a plan published more than a Lease duration ago is refused
                (it cannot follow plans: its path to the API server is cut)
    progress    optional {name: seconds since}, rounded: `poll` (the processing loop last came
                back to poll), `advance` (an owned position last advanced while the replica had
                lag; absent without lag), `commit` (the last successful commit; absent before
                the first). A heartbeat whose `poll` or `advance` exceeds the policy's
                maxPollIntervalSeconds by more than `STUCK_GRACE_S` is refused as stuck
                (`stuck_refusal`)

Answer:
    v, seq
    status      granted | refused | not-leader
    valid       granted: seconds of validity, counted by the replica from its own send time
    leader      not-leader: "host:port" of the leader when this operator knows it
    reason      refused / not-leader: why, in words
    stuck       refused: true when refused for the progress it reported; the replica then
                surrenders as when its own watchdog judges it stuck (no Lease write follows)
    spread      optional, granted: seconds over which this leader's heartbeat fleet spreads its
                fallback Lease writes once no leader answers (the fleet's size over the
                operator's write budget); absent or 0: none (`fallback_write_at`)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from groupops.planner.plan_format import LeaseRecord

__all__ = [
    "MAX_DATAGRAM",
    "STUCK_GRACE_S",
    "FallbackSpread",
    "Heartbeat",
    "HeartbeatAnswer",
    "HeartbeatFormatError",
    "HeartbeatStatus",
    "decode_answer",
    "decode_heartbeat",
    "encode_answer",
    "encode_heartbeat",
    "fallback_write_at",
    "fallback_write_may_wait",
    "grant_refusal",
    "parse_addresses",
    "stuck_refusal",
]

MAX_DATAGRAM = 1400
"""Fits one Ethernet frame: a heartbeat is never fragmented."""

STUCK_GRACE_S = 3.0
"""How far past maxPollIntervalSeconds a heartbeat's progress must be before the operator refuses
it as stuck. The replica's own watchdog declares within 2.5 s of the interval
(consumer.progress.LATEST_VERDICT_S), with a verdict that names its rule; the operator is the
backstop for a watchdog that is broken or more lenient, so it must not race a working one
(docs/design.md §7.5, fifth rule)."""

_VERSION = 1


class HeartbeatFormatError(ValueError):
    """A datagram that is not a heartbeat (or answer) of this version; the message says why."""


class HeartbeatStatus(StrEnum):
    GRANTED = "granted"
    REFUSED = "refused"
    NOT_LEADER = "not-leader"


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    namespace: str
    lease: str
    incarnation: str
    seq: int
    seen: int | None = None
    progress: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer:
    seq: int
    status: HeartbeatStatus
    valid: float = 0.0
    leader: str | None = None
    reason: str = ""
    stuck: bool = False
    spread: float = 0.0


def encode_heartbeat(heartbeat: Heartbeat) -> bytes:
    body = {
        "v": _VERSION,
        "namespace": heartbeat.namespace,
        "lease": heartbeat.lease,
        "incarnation": heartbeat.incarnation,
        "seq": heartbeat.seq,
    }
    if heartbeat.seen is not None:
        body["seen"] = heartbeat.seen
    if heartbeat.progress:
        body["progress"] = {name: round(value, 3) for name, value in heartbeat.progress.items()}
    return _fit(body)


def decode_heartbeat(data: bytes) -> Heartbeat:
    # The answering process decodes one of these per replica per interval (design §7.5, "an
    # answer costs"): one pass over the progress, checks inline rather than a call per field.
    body = _object(data)
    progress = body.get("progress")
    numbers: dict[str, float] = {}
    if progress is not None:
        if type(progress) is not dict:
            raise HeartbeatFormatError("progress must be an object of numbers")
        for name, value in progress.items():
            kind = type(value)
            if not ((kind is float and math.isfinite(value)) or (kind is int and abs(value) < 2**53)):
                raise HeartbeatFormatError("progress must be an object of numbers")
            numbers[name] = float(value)
    seen = body.get("seen")
    if seen is not None and type(seen) is not int:
        raise HeartbeatFormatError(f"seen must be an integer epoch, got {seen!r}")
    return Heartbeat(
        namespace=_text(body, "namespace"),
        lease=_text(body, "lease"),
        incarnation=_text(body, "incarnation"),
        seq=_seq(body),
        seen=seen,
        progress=numbers,
    )


def encode_answer(answer: HeartbeatAnswer) -> bytes:
    valid = round(answer.valid, 3)
    spread = round(answer.spread, 1) if answer.status is HeartbeatStatus.GRANTED else 0.0
    if (
        answer.status is HeartbeatStatus.GRANTED
        and not answer.leader
        and not answer.reason
        and type(answer.seq) is int
        and type(valid) is float
        and math.isfinite(valid)
        and type(spread) is float
        and math.isfinite(spread)
    ):
        # The answer to almost every heartbeat, as the bytes the encoder below writes for it (the
        # same keys in the same order; JSON writes a finite float as its repr).
        if spread <= 0:
            granted = b'{"v":%d,"seq":%d,"status":"granted","valid":%s}'
            return granted % (_VERSION, answer.seq, repr(valid).encode())
        spreading = b'{"v":%d,"seq":%d,"status":"granted","valid":%s,"spread":%s}'
        return spreading % (_VERSION, answer.seq, repr(valid).encode(), repr(spread).encode())
    body: dict[str, Any] = {"v": _VERSION, "seq": answer.seq, "status": answer.status.value}
    if answer.status is HeartbeatStatus.GRANTED:
        body["valid"] = valid
        if spread > 0:
            body["spread"] = spread
    if answer.leader:
        body["leader"] = answer.leader
    if answer.reason:
        body["reason"] = answer.reason[:300]
    if answer.stuck and answer.status is HeartbeatStatus.REFUSED:
        body["stuck"] = True
    return _fit(body)


def decode_answer(data: bytes) -> HeartbeatAnswer:
    body = _object(data)
    try:
        status = HeartbeatStatus(str(body.get("status")))
    except ValueError:
        raise HeartbeatFormatError(f"unknown status {body.get('status')!r}") from None
    valid = body.get("valid", 0.0)
    if not _is_number(valid) or valid < 0:
        raise HeartbeatFormatError(f"valid must be a number of seconds >= 0, got {valid!r}")
    spread = body.get("spread", 0.0)
    if not _is_number(spread) or spread < 0:
        raise HeartbeatFormatError(f"spread must be a number of seconds >= 0, got {spread!r}")
    leader = body.get("leader")
    if leader is not None and not isinstance(leader, str):
        raise HeartbeatFormatError("leader must be a string")
    reason = body.get("reason", "")
    return HeartbeatAnswer(
        seq=_seq(body),
        status=status,
        valid=float(valid),
        leader=leader or None,
        reason=reason if isinstance(reason, str) else "",
        stuck=status is HeartbeatStatus.REFUSED and body.get("stuck") is True,
        spread=float(spread) if status is HeartbeatStatus.GRANTED else 0.0,
    )


def grant_refusal(
    lease: Mapping[str, Any] | None, record: LeaseRecord | None, incarnation: str
) -> str | None:
    """Why the operator must not grant a heartbeat of `incarnation`, judged on the Lease as the
    operator last saw it (None: grant). A grant is only ever given to the process that holds the
    Lease in heartbeat mode and has not been fenced: a process that took the Lease from a zombie
    did so only after the operator's fence named the zombie, so the zombie gets no grant after it."""
    if lease is None or record is None:
        return "no Lease"
    if not (lease.get("spec") or {}).get("holderIdentity"):
        return "the Lease is not held"
    if record.incarnation != incarnation:
        return "the Lease is held by another process"
    if not record.heartbeats:
        return "the Lease is not in heartbeat mode"
    if record.fenced_incarnation == incarnation:
        return "fenced: re-read the Lease"
    return None


def fallback_write_may_wait(
    *, now: float, valid_until: float, interval_s: float, heartbeat_timeout_s: float, write_timeout_s: float
) -> bool:
    """After a heartbeat that no leader answered (none reachable, or only `not-leader` answers):
    may the replica leave its fallback Lease write for a later interval? Yes while its validity
    still covers one more interval, one more heartbeat exchange and one more write after it, so a
    write that turns out to be needed still returns before the validity ends.

    Sound for fencing because validity only ever grows with a grant or a written Lease: skipping
    a write can shorten how long the replica stays valid, never lengthen it, and the operator
    judges expiry from the last grant or write it saw, which the skipped write was not
    (docs/design.md §7.5, the fallback). It saves writes only when a grant outlasts that sum: a
    4 s Lease's 3 s grant never does, a 10 s Lease's 7.5 s grant spares the writes of the first
    3.5 s of an election gap."""
    return now + interval_s + heartbeat_timeout_s + write_timeout_s <= valid_until


def fallback_write_at(
    *, needed_since: float, last_write: float | None, spread_s: float, phase: float
) -> float:
    """When a replica that no leader answers may send its next fallback Lease write, once
    `fallback_write_may_wait` has said its validity no longer covers waiting: `needed_since` is
    the first moment it said so since the replica's last grant, `last_write` the send time of its
    last fallback write since then (None: none yet), `spread_s` the spread of its last grant and
    `phase` this process's draw from [0, 1).

    The first write goes out `phase` of the spread after it became needed, each later one a spread
    after the one before: a fleet that lost its leader at one moment writes at the rate of its
    size over the spread, which the leader set to its write budget (design §7.5, "fallback writes
    spread by the fleet's size"). With no spread (a small fleet) the write goes out when needed,
    as it always did. Sound for fencing as `fallback_write_may_wait` is: a write not sent leaves
    the validity as it was, and the replica stops consuming when it ends."""
    if spread_s <= 0:
        return needed_since if last_write is None else last_write
    if last_write is None:
        return needed_since + phase * spread_s
    return last_write + spread_s


@dataclass(slots=True)
class FallbackSpread:
    """One replica's place in its fleet's spread of fallback writes (`fallback_write_at`): its
    `phase` (drawn once by the caller), the spread its last grant named, and since that grant
    when a write was first needed and when the last one went out. The Lease keeper and the load
    generator that plays it both keep one."""

    phase: float
    spread: float = 0.0
    needed_since: float | None = None
    last_write: float | None = None

    def granted(self, spread: float) -> None:
        """A grant: its spread counts from now on, and the count of needed writes starts over."""
        self.spread = spread
        self.needed_since = self.last_write = None

    def until_write(self, now: float) -> float:
        """Seconds until the write may go out (0 or less: now); called once the validity no
        longer covers waiting (`fallback_write_may_wait`)."""
        if self.needed_since is None:
            self.needed_since = now
        slot = fallback_write_at(
            needed_since=self.needed_since, last_write=self.last_write, spread_s=self.spread, phase=self.phase
        )
        return slot - now

    def wrote(self, now: float) -> None:
        self.last_write = now


def stuck_refusal(progress: Mapping[str, float], max_poll_interval_s: float | None) -> str | None:
    """Why a heartbeat reporting `progress` must be refused as stuck (None: it is not): its
    processing loop has not come back to poll (`poll`), or it had lag and no position advanced
    (`advance`), for longer than the policy's maxPollIntervalSeconds. The replica's own watchdog
    applies the same rules; this is the operator's second judgement of them, `STUCK_GRACE_S`
    later (docs/design.md §7.5)."""
    if max_poll_interval_s is None:
        return None
    for key, what in (("poll", "not come back to poll"), ("advance", "had lag and advanced no position")):
        seconds = progress.get(key)
        if seconds is not None and seconds > max_poll_interval_s + STUCK_GRACE_S:
            limit = f"maxPollIntervalSeconds {max_poll_interval_s:g}"
            return f"stuck: it has {what} for {seconds:.1f} s ({limit})"
    return None


def parse_addresses(text: str) -> tuple[str, ...]:
    """ "host:port,host:port" -> the addresses; ValueError names the first malformed one."""
    addresses = tuple(part.strip() for part in text.split(",") if part.strip())
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port, got {address!r}")
    return addresses


# Built once: `json.dumps` with separators builds an encoder per call, and `json.loads` of bytes
# sniffs their encoding per call; the answering process does both for every heartbeat.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
_DECODER = json.JSONDecoder()


def _fit(body: Mapping[str, Any]) -> bytes:
    data = _ENCODER.encode(body).encode()
    if len(data) > MAX_DATAGRAM:
        raise HeartbeatFormatError(f"{len(data)} bytes, more than {MAX_DATAGRAM}")
    return data


def _object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_DATAGRAM:
        raise HeartbeatFormatError(f"{len(data)} bytes, more than {MAX_DATAGRAM}")
    try:
        body = _DECODER.decode(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HeartbeatFormatError(f"not JSON: {e}") from None
    if type(body) is not dict:
        raise HeartbeatFormatError("not a JSON object")
    if body.get("v") != _VERSION:
        raise HeartbeatFormatError(f"version {body.get('v')!r}, this side speaks {_VERSION}")
    return body


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if type(value) is not str or not value:
        raise HeartbeatFormatError(f"{key} must be a non-empty string")
    return value


def _seq(body: Mapping[str, Any]) -> int:
    seq = body.get("seq")
    if type(seq) is not int or seq < 0:  # JSON gives exactly int, or bool for true/false
        raise HeartbeatFormatError(f"seq must be an integer >= 0, got {seq!r}")
    return seq


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
