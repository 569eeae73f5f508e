"""The operator's side of consumer heartbeats (docs/design.md §7.5): answer them, and keep what
they prove on each policy's `LeaseClock`.

Who calls it: `controller.main` starts `HeartbeatServer` in every operator process, standby
included (a standby answers `not-leader` with the leader's address); each policy's daemon
`attach`es its clock while it runs; the reconcile's fence asks `may_fence` first and reports a
lost compare-and-swap with `fence_failed`.

The grant (`HeartbeatBook.answer`): only the leader grants, only to the incarnation that holds the
Lease in heartbeat mode, unfenced, as the Lease cache shows it (`planner.liveness.grant_refusal`).
A grant notes the moment on the policy's clock (`LeaseClock.hear`) and tells the replica it is
valid for 0.75 x the Lease duration counted from its own send time, which is earlier than the
moment noted: the replica stops before the operator may judge it silent. A new leader grants
before its daemon of the policy runs (docs/design.md §7.5, "a new leader grants from its first
moment"): such a grant is kept on the book and heard on the policy's clock when the daemon
attaches it, before that clock can judge anyone; the fence guard counts it too.

The spread: a grant also tells the replica over how many seconds its fleet spreads the fallback
Lease writes it sends while no leader answers (`planner.liveness.fallback_write_at`): the number
of replicas this operator granted within the last `FLEET_WINDOW_S` over the operator's budget
of such writes per second (`fallback_writes_per_second`; 0: no spread). A fleet that loses its
leader at one moment then writes at about the budget's rate (docs/design.md §7.5).

Stuck (`planner.liveness.stuck_refusal`): a heartbeat whose reported progress exceeds the
policy's maxPollIntervalSeconds (noted by each reconcile, `note_max_poll_interval`) is refused
with `stuck`, and its replica surrenders as when its own watchdog fires: it writes nothing more,
so it falls silent and is fenced as a silent replica is (docs/design.md §7.5).

Progress: the last progress each replica reported is kept (`progress_of`) with the wall time it
was heard, for the policy's status and the member gauges.

The fence guard: the reconcile judged a Lease silent; between that judgement and the Lease write a
heartbeat may arrive. `may_fence` re-checks silence and records a refusal under one lock with the
grant, so either the heartbeat was granted first (the fence is not written: the replica is alive)
or it is refused (the replica's validity has ended and it gets no more). The refusal holds while
the Lease view still shows the version the fence was judged on, or the one it showed when the
refusal began (a mirror in another process may lag the reconcile's cache: it then shows an older
version first); after that the Lease itself says `fenced-incarnation`.

Where it runs: in the operator's process (`HeartbeatServer`, a thread), or in a process of its own
(`controller.heartbeat_process`) that holds a mirror of the Lease cache and sends what it heard
back; answers are counted through a `HeartbeatTally` either way.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from groupops.controller.lease_records import LeaseRecords
from groupops.controller.metrics import Metrics
from groupops.controller.names import LABEL_POLICY
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import (
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatFormatError,
    HeartbeatStatus,
    decode_heartbeat,
    encode_answer,
    grant_refusal,
    stuck_refusal,
)
from groupops.planner.plan_format import LeaseRecord
from groupops.planner.wire import PlanFormatError

__all__ = [
    "FLEET_WINDOW_S",
    "GRANT_FRACTION",
    "HeardProgress",
    "HeartbeatBook",
    "HeartbeatGuard",
    "HeartbeatServer",
    "HeartbeatTally",
    "MetricsTally",
    "receive_stamped",
    "stamp_receipts",
]

log = logging.getLogger(__name__)

GRANT_FRACTION = 0.75
"""A grant's validity as a fraction of the Lease duration (the consumer's renew deadline is the
same fraction): the margin covers clock-rate drift between the two machines."""

FLEET_WINDOW_S = 30.0
"""The fleet counted for the spread is the replicas granted within the last one or two windows of
this length: longer than any heartbeat interval a Lease of up to a minute allows."""

LeaseLookup = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, Lease name) -> the Lease as the operator's cache holds it."""

_PolicyKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class HeardProgress:
    """What a replica last reported (`planner.liveness.Heartbeat.progress`), and when (wall
    time) this operator heard it."""

    progress: Mapping[str, float]
    heard_at: float
    policy: str


_RECEIVE_BUFFER_BYTES = 4 << 20
_BURST = 256
"""Datagrams answered per wake-up at most, so that a stop is seen under any load."""
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's option (asm-generic value; Python does not export it): the kernel stamps each datagram
with its CLOCK_REALTIME receive time, read as ancillary data (SCM_TIMESTAMPNS, the same number)."""
_TIMESPEC = struct.Struct("@qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)


def stamp_receipts(sock: socket.socket) -> bool:
    """Ask the kernel to stamp every datagram `sock` receives with its receive time (Linux);
    False where it cannot. The kernel switches stamping on shortly after (a deferred switch):
    a datagram that arrives before then is stamped when it is read, so it reads as not waiting."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def receive_stamped(sock: socket.socket, size: int) -> tuple[bytes, Any, float | None]:
    """One datagram of a `stamp_receipts` socket: (data, sender, the kernel's receive time in
    epoch seconds, or None when it was not stamped). How long a datagram waited unread is
    `time.time()` minus that time: the reader's own lateness, not the network's."""
    data, ancillary, _, sender = sock.recvmsg(size, _STAMP_SPACE)
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(value)
            return data, sender, float(seconds) + float(nanoseconds) / 1e9
    return data, sender, None


class HeartbeatTally(Protocol):
    """Where answers are counted: the operator's metrics in its own process, or a tally sent to
    it from the answering process (`controller.heartbeat_process`)."""

    def answered(self, label: str, count: int = 1) -> None:
        """Heartbeats answered (granted, refused, refused-stuck, not-leader) or malformed."""

    def progressed(self, namespace: str, lease: str, identity: str, heard: HeardProgress) -> None:
        """The replica of `lease` (holder `identity`) reported its progress."""

    def waited(self, seconds: float) -> None:
        """The oldest heartbeat of a burst waited this long in the socket before it was read."""


class HeartbeatGuard(Protocol):
    """What the reconciles call: `HeartbeatBook` in this process, or `HeartbeatProcess` carrying
    the same calls to the answering process."""

    def attach(self, namespace: str, policy: str, clock: LeaseClock) -> None: ...

    def detach(self, namespace: str, policy: str, clock: LeaseClock) -> None: ...

    def note_published(self, namespace: str, policy: str, epoch: int) -> None: ...

    def note_max_poll_interval(self, namespace: str, policy: str, seconds: float) -> None: ...

    def progress_of(self, namespace: str, lease: str) -> HeardProgress | None: ...

    def may_fence(
        self,
        namespace: str,
        policy: str,
        lease: str,
        *,
        incarnation: str | None,
        version: str,
        duration_s: float,
    ) -> bool: ...

    def fence_failed(self, namespace: str, lease: str, *, version: str) -> None: ...


class MetricsTally:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def answered(self, label: str, count: int = 1) -> None:
        self._metrics.heartbeats.labels(label).inc(count)

    def progressed(self, namespace: str, lease: str, identity: str, heard: HeardProgress) -> None:
        poll = heard.progress.get("poll")
        if poll is not None:
            self._metrics.member_seconds_since_poll.labels(namespace, heard.policy, identity).set(poll)

    def waited(self, seconds: float) -> None:
        self._metrics.heartbeat_socket_wait_seconds.observe(seconds)


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A fence is being written on `version` of a Lease whose holder is `incarnation`. `shown`:
    the version this book's Lease view showed when the refusal began, which is older than
    `version` when the view lags the one the fence was judged on (another process's mirror)."""

    incarnation: str | None
    version: str
    shown: str | None

    def holds(self, incarnation: str | None, shown: str | None) -> bool:
        return incarnation == self.incarnation and shown in (self.version, self.shown)


class HeartbeatBook:
    def __init__(
        self,
        *,
        leases: LeaseLookup,
        leading: Callable[[], bool],
        leader_address: Callable[[], str | None],
        metrics: Metrics | None = None,
        tally: HeartbeatTally | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        fallback_writes_per_second: float = 0.0,
    ) -> None:
        if fallback_writes_per_second < 0 or not math.isfinite(fallback_writes_per_second):
            raise ValueError(f"fallback writes per second must be >= 0, got {fallback_writes_per_second}")
        self._leases = leases
        self._leading = leading
        self._leader_address = leader_address
        self._tally = tally if tally is not None else None if metrics is None else MetricsTally(metrics)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._clocks: dict[_PolicyKey, LeaseClock] = {}
        self._unattached: dict[_PolicyKey, dict[str, float]] = {}
        """Grants given while the policy had no clock here, by Lease name: heard on its clock when
        one is attached."""
        self._refused: dict[tuple[str, str], _Refusal] = {}
        self._published: dict[_PolicyKey, tuple[int, float]] = {}
        self._max_poll: dict[_PolicyKey, float] = {}
        self._progress: dict[tuple[str, str], HeardProgress] = {}
        """The last progress each replica reported, by (namespace, Lease name)."""
        self._records = LeaseRecords()
        """Each Lease's annotations as parsed (`_record_of`)."""
        self._write_budget = fallback_writes_per_second
        self._granted_now: set[tuple[str, str]] = set()
        self._granted_before: set[tuple[str, str]] = set()
        self._window_ends = -math.inf

    # -- the policies' daemons ----------------------------------------------------------------------

    def attach(self, namespace: str, policy: str, clock: LeaseClock) -> None:
        with self._lock:
            for lease, granted in self._unattached.pop((namespace, policy), {}).items():
                clock.hear(MemberId(lease), granted)
            self._clocks[(namespace, policy)] = clock

    def detach(self, namespace: str, policy: str, clock: LeaseClock) -> None:
        with self._lock:
            if self._clocks.get((namespace, policy)) is clock:
                del self._clocks[(namespace, policy)]
                self._max_poll.pop((namespace, policy), None)
                gone = [k for k, v in self._progress.items() if k[0] == namespace and v.policy == policy]
                for key in gone:
                    del self._progress[key]

    def note_published(self, namespace: str, policy: str, epoch: int) -> None:
        """The policy's plan is at `epoch` (noted with the moment this process first saw it)."""
        with self._lock:
            known = self._published.get((namespace, policy))
            if known is None or known[0] < epoch:
                self._published[(namespace, policy)] = (epoch, self._clock())

    def note_max_poll_interval(self, namespace: str, policy: str, seconds: float) -> None:
        """The policy's maxPollIntervalSeconds: heartbeats reporting longer are refused as stuck."""
        with self._lock:
            self._max_poll[(namespace, policy)] = seconds

    def progress_of(self, namespace: str, lease: str) -> HeardProgress | None:
        """What the replica of `lease` last reported, None when it never reported progress."""
        return self._progress.get((namespace, lease))

    # -- the fence guard ----------------------------------------------------------------------------

    def may_fence(
        self,
        namespace: str,
        policy: str,
        lease: str,
        *,
        incarnation: str | None,
        version: str,
        duration_s: float,
    ) -> bool:
        """False when a heartbeat was granted within `duration_s` (the replica is alive); else
        refuse every heartbeat of `incarnation` until the Lease view moves past `version` (and
        past the version it showed now, when it lags the reconcile's)."""
        shown = _version(self._leases(namespace, lease))
        with self._lock:
            clock = self._clocks.get((namespace, policy))
            on_clock = None if clock is None else clock.heard_at(MemberId(lease))
            heard = max(
                -math.inf if on_clock is None else on_clock,
                self._unattached.get((namespace, policy), {}).get(lease, -math.inf),
            )
            if self._clock() - heard < duration_s:
                return False
            self._refused[(namespace, lease)] = _Refusal(incarnation, version, shown)
            return True

    def fence_failed(self, namespace: str, lease: str, *, version: str) -> None:
        """The fence judged on `version` did not land: the replica wrote (it is alive)."""
        with self._lock:
            refused = self._refused.get((namespace, lease))
            if refused is not None and refused.version == version:
                del self._refused[(namespace, lease)]

    # -- answering ----------------------------------------------------------------------------------

    def answer(self, heartbeat: Heartbeat) -> HeartbeatAnswer:
        if not self._leading():
            return self._answer(
                heartbeat,
                HeartbeatStatus.NOT_LEADER,
                leader=self._leader_address(),
                reason="this operator stands by",
            )
        lease = self._leases(heartbeat.namespace, heartbeat.lease)
        try:
            record = self._record_of(heartbeat.namespace, heartbeat.lease, lease)
        except PlanFormatError as e:
            return self._answer(heartbeat, HeartbeatStatus.REFUSED, reason=f"the Lease is malformed: {e}")
        reason = grant_refusal(lease, record, heartbeat.incarnation)
        if lease is None or reason is not None:
            return self._answer(heartbeat, HeartbeatStatus.REFUSED, reason=reason or "no Lease")
        meta = lease.get("metadata") or {}
        policy = str((meta.get("labels") or {}).get(LABEL_POLICY, ""))
        duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 0)
        key = (heartbeat.namespace, heartbeat.lease)
        with self._lock:
            refused = self._refused.get(key)
            if refused is not None:
                if refused.holds(heartbeat.incarnation, _version(lease)):
                    return self._answer(
                        heartbeat, HeartbeatStatus.REFUSED, reason="fenced: re-read the Lease"
                    )
                del self._refused[key]
            if duration <= 0:
                return self._answer(heartbeat, HeartbeatStatus.REFUSED, reason="the Lease has no duration")
            now = self._clock()
            published = self._published.get((heartbeat.namespace, policy))
            if (
                heartbeat.seen is not None
                and published is not None
                and heartbeat.seen < published[0]
                and now - published[1] > duration
            ):
                return self._answer(
                    heartbeat,
                    HeartbeatStatus.REFUSED,
                    reason=f"plan epoch {published[0]} was published {now - published[1]:.0f} s ago and "
                    f"this replica has seen only {heartbeat.seen}",
                )
            if heartbeat.progress:
                self._note_progress(heartbeat, policy, str((lease.get("spec") or {}).get("holderIdentity")))
            stuck = stuck_refusal(heartbeat.progress, self._max_poll.get((heartbeat.namespace, policy)))
            if stuck is not None:
                # Not heard: the replica surrenders on this answer and falls silent (§7.5).
                return self._answer(heartbeat, HeartbeatStatus.REFUSED, reason=stuck, stuck=True)
            clock = self._clocks.get((heartbeat.namespace, policy))
            if clock is not None:
                clock.hear(MemberId(heartbeat.lease), now)
            else:
                self._unattached.setdefault((heartbeat.namespace, policy), {})[heartbeat.lease] = now
            spread = self._spread(key, now)
        return self._answer(
            heartbeat, HeartbeatStatus.GRANTED, valid=GRANT_FRACTION * duration, spread=spread
        )

    def fleet(self) -> int:
        """Replicas granted within the last one or two `FLEET_WINDOW_S`."""
        with self._lock:
            return self._fleet()

    def _fleet(self) -> int:
        return max(len(self._granted_now), len(self._granted_before))

    def _spread(self, key: tuple[str, str], now: float) -> float:
        """Under the lock, on a grant: note the replica in the fleet; the fleet's spread."""
        if now >= self._window_ends:
            # After a window with no grant at all, the one before it is older than two windows.
            idle = now >= self._window_ends + FLEET_WINDOW_S
            self._granted_before, self._granted_now = (set() if idle else self._granted_now), set()
            self._window_ends = now + FLEET_WINDOW_S
        self._granted_now.add(key)
        if self._write_budget <= 0:
            return 0.0
        return self._fleet() / self._write_budget

    def _record_of(self, namespace: str, name: str, lease: Mapping[str, Any] | None) -> LeaseRecord | None:
        """The Lease's annotations, parsed once per content (`lease_records`): every heartbeat of
        a replica reads the same Lease, and parsing it was the largest part of an answer (design
        §7.5)."""
        if lease is None:
            self._records.forget(namespace, name)
            return None
        return self._records.of(lease)

    def _note_progress(self, heartbeat: Heartbeat, policy: str, identity: str) -> None:
        heard = HeardProgress(dict(heartbeat.progress), self._wall(), policy)
        self._progress[(heartbeat.namespace, heartbeat.lease)] = heard
        if self._tally is not None:
            self._tally.progressed(heartbeat.namespace, heartbeat.lease, identity, heard)

    def _answer(
        self,
        heartbeat: Heartbeat,
        status: HeartbeatStatus,
        *,
        valid: float = 0.0,
        leader: str | None = None,
        reason: str = "",
        stuck: bool = False,
        spread: float = 0.0,
    ) -> HeartbeatAnswer:
        if self._tally is not None:
            self._tally.answered("refused-stuck" if stuck else status.value)
        return HeartbeatAnswer(
            seq=heartbeat.seq,
            status=status,
            valid=valid,
            leader=leader,
            reason=reason,
            stuck=stuck,
            spread=spread,
        )


def _version(lease: Mapping[str, Any] | None) -> str | None:
    return None if lease is None else str((lease.get("metadata") or {}).get("resourceVersion"))


class HeartbeatServer:
    """One UDP socket and one thread: read a datagram, answer it, repeat."""

    def __init__(
        self,
        book: HeartbeatBook,
        host: str,
        port: int,
        *,
        metrics: Metrics | None = None,
        tally: HeartbeatTally | None = None,
    ) -> None:
        self._book = book
        self._tally = tally if tally is not None else None if metrics is None else MetricsTally(metrics)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_DGRAM)
        # Room for a few seconds of heartbeats: while this thread waits for the GIL, datagrams
        # queue here instead of being dropped (each drop costs the replica a Lease write). The
        # kernel caps it at net.core.rmem_max.
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER_BYTES)
        self._socket.bind((host, port))
        buffer = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        if buffer < _RECEIVE_BUFFER_BYTES:
            log.warning(
                "heartbeat receive buffer is %d bytes (net.core.rmem_max caps it; %d asked): a busy "
                "operator drops heartbeats sooner, and each drop can cost a replica a Lease write",
                buffer,
                _RECEIVE_BUFFER_BYTES,
            )
        self._socket.setblocking(False)
        # How long heartbeats wait here is this answerer's own lateness (a metric; Linux only).
        self._stamped = self._tally is not None and stamp_receipts(self._socket)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="heartbeats", daemon=True)
        self._malformed_logged = 0.0

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._socket.close()

    def _serve(self) -> None:
        # One poll per burst, then every queued datagram read without waiting: a socket with a
        # timeout polls before each read, two system calls and two GIL hand-offs per heartbeat.
        poller = select.poll()
        poller.register(self._socket, select.POLLIN)
        while not self._stop.is_set():
            try:
                if not poller.poll(500):
                    continue
            except OSError as e:
                if self._stop.is_set():
                    return
                log.warning("heartbeat socket: %s", e)
                continue
            self._drain()

    def _drain(self) -> None:
        for n in range(_BURST):
            try:
                if n == 0 and self._stamped:  # the oldest of the burst: it waited the longest
                    data, sender, received_at = receive_stamped(self._socket, 2048)
                    self._note_wait(received_at)
                else:
                    data, sender = self._socket.recvfrom(2048)
            except BlockingIOError:
                return
            except OSError as e:
                if not self._stop.is_set():
                    log.warning("heartbeat socket: %s", e)
                return
            try:
                answer = self._book.answer(decode_heartbeat(data))
            except HeartbeatFormatError as e:
                self._malformed(sender, e)
                continue
            except Exception:  # one bad datagram must never stop liveness for everyone
                log.exception("answering a heartbeat from %s failed", sender)
                continue
            try:
                self._socket.sendto(encode_answer(answer), sender)
            except OSError as e:  # a full send buffer too: the replica asks again or falls back
                log.debug("answering %s: %s", sender, e)

    def _note_wait(self, received_at: float | None) -> None:
        if received_at is not None and self._tally is not None:
            self._tally.waited(max(0.0, time.time() - received_at))

    def _malformed(self, sender: Any, error: HeartbeatFormatError) -> None:
        if self._tally is not None:
            self._tally.answered("malformed")
        now = time.monotonic()
        if now - self._malformed_logged > 60:
            self._malformed_logged = now
            log.warning("dropped a datagram from %s that is not a heartbeat: %s", sender, error)
