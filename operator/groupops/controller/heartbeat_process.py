"""Consumer heartbeats answered in a process of their own (docs/design.md §7.5, "the answering
process").

Why: in the operator's process the answering thread shares the GIL with kopf and the reconcile
workers; on the load benchmark one process answered about 1,450 heartbeats/s in time next to its
reconciles, and every late answer costs a replica a Lease write. Here a child process owns the UDP
socket and a `HeartbeatBook` of its own, so answering competes with the reconciles for a core,
not for one interpreter.

What crosses between the two processes (four one-way pipes, each message a tuple):

    operator -> answerer   Lease events (a mirror of the operator's Lease cache, sent in the
                           cache's order), attach/detach of policies, published epochs,
                           maxPollIntervalSeconds, the fence guard's calls; and either the
                           election's commands (the election kept here, §8.1,
                           `controller.answerer_election`; its pulses go by a shared
                           `PulseStamp`, not this pipe) or leadership as the operator's own
                           elector has it (its monotonic deadline and the leader's address)
    answerer -> operator   every 0.1 s, even when empty: the heartbeats granted (identity,
                           moment), progress, the answers by kind, the moment it was taken;
                           the fence guard's replies, on a pipe of their own; and the
                           election's reports, on a fourth

Safety stays where it was: the answerer's book is the one that grants, and `may_fence` asks that
book, so "granted, then not fenced" or "fenced, then refused" is decided under one lock in one
process, as before. The operator's `LeaseClock`s learn of grants a report late (0.1 s, or seconds
when the operator is starved); each report carries the moment it was taken, and the attached
clocks judge silence only up to the last one applied (`HeardThrough`), so a late report holds a
judgement back instead of waking a policy for a silence that is not there. The guard still says
no to any fence judged on a clock that missed a grant. Both
processes read the same CLOCK_MONOTONIC, so a grant's moment means the same in each. The
answerer grants only until the elector's deadline it was last told, never later than the operator
itself would, and it exits when the operator's end of its pipe closes (the operator died): a
standby's answerer never saw a deadline and answers not-leader.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from groupops.controller.answerer_election import (
    PULSE_TIMEOUT_S,
    STARVED_PULSE_LIMIT_S,
    AnswererElection,
    ElectionHost,
    PulseStamp,
)
from groupops.controller.cache import Listener
from groupops.controller.heartbeats import HeardProgress, HeartbeatBook, HeartbeatServer, MetricsTally
from groupops.controller.metrics import Metrics
from groupops.controller.settings import ElectionSettings
from groupops.model import MemberId
from groupops.planner.handoff import HeardThrough, LeaseClock
from groupops.stacks import dump_stacks_on_usr1

__all__ = ["HeartbeatProcess", "HeartbeatProcessError"]

log = logging.getLogger(__name__)

REPORT_EVERY_S = 0.1
"""How often the answerer sends what it granted: the delay before the operator's clocks show a
grant (which only ever makes a fence guard say no)."""

FORWARD_FRACTION = 0.25
"""A replica's grant reaches the operator's clock when the last one forwarded for it is at least
this share of its Lease duration old (every grant is still on the answerer's own clock, the one
the fence guard asks). With heartbeats at most a quarter of the duration apart, the operator's
clock is then never more than about half a duration behind the answerer's, so it never wakes a
policy for a silence that is not there; forwarding every grant was most of what crossed the pipe
at 5,000 policies (docs/design.md §7.5, "the answerer forwards")."""

PROGRESS_EVERY_S = 2.0
"""A replica's progress reaches the operator at most this often (status and the
seconds-since-poll gauge show it; the stuck rule is the answerer's own), unless its holder
changed."""

WAITS_PER_REPORT = 1_000
"""Socket waits carried per report at most (one per burst read: a few hundred at 5,000 policies)."""

FENCE_GUARD_TIMEOUT_S = 2.0
"""An unanswered fence guard does not fence (the safe answer); the answerer is then wedged or
dead, and the operator exits (`on_lost`)."""

START_TIMEOUT_S = 60.0
"""Spawning re-imports groupops in the child: seconds on a loaded 2-core machine."""


class HeartbeatProcessError(Exception):
    """The answering process could not start (its socket, or the process itself)."""


@dataclass
class _Reported:
    """One report of the answerer: what changed since the last one, the latest of each only.
    It crosses the pipe as `wire()`, plain tuples and dicts, which pickle in C (a dataclass per
    progress, pickled field by field in Python, was a fifth of the answerer's CPU)."""

    heard: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """(namespace, policy, Lease name) -> monotonic moment of the last grant forwarded."""
    progress: dict[tuple[str, str], tuple[str, Mapping[str, float], float, str]] = field(default_factory=dict)
    """(namespace, Lease name) -> (holder identity, progress, heard at, policy)."""
    answered: Counter[str] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)
    """How long the oldest heartbeat of each burst waited in the socket (`HeartbeatTally.waited`),
    at most `WAITS_PER_REPORT`."""
    sent_at: float = -math.inf
    """When the report was taken (monotonic): every grant forwarded before then is in it or in an
    earlier report. Sent even when nothing else is, so the operator's clocks can judge silence up
    to it (`HeardThrough`)."""

    def wire(self) -> tuple[Any, ...]:
        return (self.heard, self.progress, dict(self.answered), self.waits, self.sent_at)

    @classmethod
    def from_wire(cls, wire: tuple[Any, ...]) -> _Reported:
        heard, progress, answered, waits, sent_at = wire
        return cls(heard, progress, Counter(answered), waits, sent_at)


class HeartbeatProcess:
    """The operator's side: the calls of `HeartbeatBook` the reconciles make (attach, detach,
    note_published, note_max_poll_interval, progress_of, may_fence, fence_failed), carried to the
    answering process; `lease_event` feeds its Lease mirror and `start_leadership` its view of the
    election."""

    def __init__(
        self, host: str, port: int, *, metrics: Metrics | None = None, fallback_writes_per_second: float = 0.0
    ) -> None:
        self.metrics = metrics
        self._tally = None if metrics is None else MetricsTally(metrics)
        context = multiprocessing.get_context("spawn")  # no fork of a process full of threads
        commands_in, self._commands = context.Pipe(duplex=False)
        self._replies, replies_out = context.Pipe(duplex=False)
        self._reports, reports_out = context.Pipe(duplex=False)
        self._election_reports, election_out = context.Pipe(duplex=False)
        self._pulse = PulseStamp(context)
        self._process = context.Process(
            target=_answer,
            args=(
                host,
                port,
                _ChildEnds(commands_in, replies_out, reports_out, election_out),
                self._pulse,
                fallback_writes_per_second,
            ),
            name="groupops-heartbeats",
            daemon=True,
        )
        self._process.start()
        for end in (commands_in, replies_out, reports_out, election_out):
            end.close()  # the child holds them now: our copies would hide its death
        self._send_lock = threading.Lock()
        self._guard_lock = threading.Lock()
        self._lock = threading.Lock()
        self._clocks: dict[tuple[str, str], LeaseClock] = {}
        self._progress: dict[tuple[str, str], HeardProgress] = {}
        self.heard_through = HeardThrough()
        """How far the answerer's reports applied here go: the attached clocks judge silence up
        to it and no further (design §7.5)."""
        self._told: dict[tuple[str, str, str], object] = {}
        """What the answerer was last told per (kind, namespace, policy): the same value is not
        sent again (every reconcile notes its epoch and maxPollIntervalSeconds)."""
        self._stopping = threading.Event()
        self.on_lost: Callable[[str], None] | None = None
        """Called once (from a thread of this object) when the answerer dies or wedges."""
        self.port = self._await_start()
        self._receiver = threading.Thread(target=self._receive, name="heartbeat-reports", daemon=True)
        self._receiver.start()

    def _await_start(self) -> int:
        if not self._replies.poll(START_TIMEOUT_S):
            self._process.kill()
            raise HeartbeatProcessError(f"the heartbeat process did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, value = self._replies.recv()
        except (EOFError, OSError):
            self._process.join(timeout=5)
            raise HeartbeatProcessError(
                f"the heartbeat process exited as it started (code {self._process.exitcode}); its "
                "error is above in this log"
            ) from None
        if kind != "ready":
            self._process.join(timeout=5)
            raise HeartbeatProcessError(str(value))
        return int(value)

    # -- feeding the answerer -----------------------------------------------------------------------

    def _send(self, *message: Any) -> None:
        with self._send_lock:
            try:
                self._commands.send(message)
            except (BrokenPipeError, OSError) as e:
                self._lost(f"cannot reach the heartbeat process: {e}")

    def mirror_leases(self, listen: Callable[[Listener], Sequence[dict[str, Any]]]) -> None:
        """Start the answerer's Lease mirror: `listen(listener)` registers the listener and
        returns the Leases it does not cover (a list taken with the registration); both go
        through the send lock, so the mirror sees the cache's order."""
        with self._send_lock:
            for lease in listen(self.lease_event):
                self._commands.send(("lease", "ADDED", _slim(lease)))

    def lease_event(self, event_type: str, lease: dict[str, Any]) -> None:
        self._send("lease", event_type, _slim(lease))

    def election(
        self,
        settings: ElectionSettings,
        advertise: str | None,
        *,
        pulse_timeout_s: float = PULSE_TIMEOUT_S,
        starved_limit_s: float = STARVED_PULSE_LIMIT_S,
    ) -> AnswererElection:
        """Campaign and renew in the answering process (docs/design.md §8.1); the answerer then
        grants on that election's own deadline, and `start_leadership` is not called."""
        return AnswererElection(
            self._send,
            self._election_reports,
            self._pulse,
            settings,
            advertise,
            pulse_timeout_s=pulse_timeout_s,
            starved_limit_s=starved_limit_s,
            count_request=None if self.metrics is None else self.metrics.count_request,
        )

    def start_leadership(
        self, deadline: Callable[[], float], leader_address: Callable[[], str | None]
    ) -> None:
        """Tell the answerer, every 0.25 s, until when this operator leads (monotonic; it grants
        only before that) and who leads: for an election kept in this process (or none)."""

        def run() -> None:
            last: tuple[float, str | None] | None = None
            while not self._stopping.wait(0.25):
                now = (deadline(), leader_address())
                if now != last:
                    self._send("leading", *now)
                    last = now

        threading.Thread(target=run, name="heartbeat-leadership", daemon=True).start()

    # -- HeartbeatBook's calls ----------------------------------------------------------------------

    def attach(self, namespace: str, policy: str, clock: LeaseClock) -> None:
        clock.follow(self.heard_through)
        with self._lock:
            self._clocks[(namespace, policy)] = clock
        self._send("attach", namespace, policy)

    def detach(self, namespace: str, policy: str, clock: LeaseClock) -> None:
        with self._lock:
            if self._clocks.get((namespace, policy)) is not clock:
                return
            del self._clocks[(namespace, policy)]
            clock.follow(None)
            for kind in ("published", "max_poll"):
                self._told.pop((kind, namespace, policy), None)
            gone = [k for k, v in self._progress.items() if k[0] == namespace and v.policy == policy]
            for key in gone:
                del self._progress[key]
        self._send("detach", namespace, policy)

    def note_published(self, namespace: str, policy: str, epoch: int) -> None:
        self._tell("published", namespace, policy, epoch)

    def note_max_poll_interval(self, namespace: str, policy: str, seconds: float) -> None:
        self._tell("max_poll", namespace, policy, seconds)

    def _tell(self, kind: str, namespace: str, policy: str, value: object) -> None:
        """Send a policy's value unless the answerer already has it: one pipe write per change,
        not one per reconcile (their contention for the pipe was a fifth of the operator's CPU at
        1,000 policies)."""
        key = (kind, namespace, policy)
        with self._lock:
            if key in self._told and self._told[key] == value:
                return
            self._told[key] = value
        self._send(kind, namespace, policy, value)

    def progress_of(self, namespace: str, lease: str) -> HeardProgress | None:
        with self._lock:
            return self._progress.get((namespace, lease))

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
        """The answerer's `HeartbeatBook.may_fence`; False (do not fence) when it cannot say."""
        with self._guard_lock:
            self._send("may_fence", namespace, policy, lease, incarnation, version, duration_s)
            try:
                if self._replies.poll(FENCE_GUARD_TIMEOUT_S):
                    return bool(self._replies.recv())
            except (EOFError, OSError):
                pass
        self._lost(f"the heartbeat process did not answer a fence guard within {FENCE_GUARD_TIMEOUT_S} s")
        return False

    def fence_failed(self, namespace: str, lease: str, *, version: str) -> None:
        self._send("fence_failed", namespace, lease, version)

    # -- reports ------------------------------------------------------------------------------------

    def _receive(self) -> None:
        while not self._stopping.is_set():
            try:
                report = _Reported.from_wire(self._reports.recv())
            except (EOFError, OSError):
                if not self._stopping.is_set():
                    self._lost(f"the heartbeat process exited (code {self._process.exitcode})")
                return
            try:
                self._apply(report)
            except Exception:  # the next report must still be applied (see `report` in the child)
                log.exception("applying a heartbeat report failed")

    def _apply(self, report: _Reported) -> None:
        with self._lock:
            for (namespace, policy, lease), moment in report.heard.items():
                clock = self._clocks.get((namespace, policy))
                if clock is not None:
                    clock.hear(MemberId(lease), moment)
            progressed = [
                (key, identity, HeardProgress(progress, heard_at, policy))
                for key, (identity, progress, heard_at, policy) in report.progress.items()
                if (key[0], policy) in self._clocks
            ]
            for key, _, heard in progressed:
                self._progress[key] = heard
            # After the grants it carries: a clock never sees the horizon past a grant it lacks.
            self.heard_through.advance(report.sent_at)
        if self.metrics is not None:
            self.metrics.heartbeat_report_delay_seconds.observe(max(0.0, time.monotonic() - report.sent_at))
        if self._tally is not None:
            for label, count in report.answered.items():
                self._tally.answered(label, count)
            for seconds in report.waits:
                self._tally.waited(seconds)
            for (namespace, lease), identity, heard in progressed:
                self._tally.progressed(namespace, lease, identity, heard)

    def _lost(self, reason: str) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        log.critical("%s", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    def alive(self) -> bool:
        return self._process.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        with self._send_lock:
            self._commands.close()  # the answerer exits at end of file
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)


def _slim(lease: Mapping[str, Any]) -> dict[str, Any]:
    """What the answerer reads of a Lease (`HeartbeatBook.answer`, `grant_refusal`)."""
    meta = lease.get("metadata") or {}
    return {
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "resourceVersion", "labels", "annotations")
            if key in meta
        },
        "spec": dict(lease.get("spec") or {}),
    }


# -- the answering process --------------------------------------------------------------------------


class _RecordingClock(LeaseClock):
    """The answerer's clock of one policy: grants are kept as on any clock, and forwarded to the
    operator's clock of the same policy a quarter of the Lease's duration apart at most
    (`FORWARD_FRACTION`)."""

    def __init__(
        self, key: tuple[str, str], outbox: _Outbox, lease: Callable[[str, str], Mapping[str, Any] | None]
    ) -> None:
        super().__init__()
        self._key = key
        self._outbox = outbox
        self._lease = lease

    def hear(self, identity: MemberId, now: float) -> None:
        super().hear(identity, now)
        lease = self._lease(self._key[0], str(identity))
        duration = float(((lease or {}).get("spec") or {}).get("leaseDurationSeconds") or 0)
        self._outbox.heard(self._key, identity, now, forward_after_s=duration * FORWARD_FRACTION)


class _Outbox:
    """What the answerer has to report, gathered between two reports (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._report = _Reported()
        self._forwarded: dict[tuple[str, str], dict[str, float]] = {}
        """(namespace, policy) -> Lease name -> the moment of the last grant forwarded."""
        self._progress_sent: dict[tuple[str, str], tuple[str, float]] = {}
        """(namespace, Lease name) -> (holder, heard at) of the last progress forwarded."""

    def heard(self, key: tuple[str, str], identity: MemberId, now: float, *, forward_after_s: float) -> None:
        lease = str(identity)
        with self._lock:
            forwarded = self._forwarded.setdefault(key, {})
            if now - forwarded.get(lease, -math.inf) < forward_after_s:
                return
            forwarded[lease] = now
            self._report.heard[(key[0], key[1], lease)] = now

    def answered(self, label: str, count: int = 1) -> None:
        with self._lock:
            self._report.answered[label] += count

    def waited(self, seconds: float) -> None:
        with self._lock:
            if len(self._report.waits) < WAITS_PER_REPORT:
                self._report.waits.append(seconds)

    def progressed(self, namespace: str, lease: str, identity: str, heard: HeardProgress) -> None:
        with self._lock:
            sent = self._progress_sent.get((namespace, lease))
            if sent is not None and sent[0] == identity and heard.heard_at - sent[1] < PROGRESS_EVERY_S:
                return
            self._progress_sent[(namespace, lease)] = (identity, heard.heard_at)
            entry = (identity, heard.progress, heard.heard_at, heard.policy)
            self._report.progress[(namespace, lease)] = entry

    def forget(self, namespace: str, policy: str) -> None:
        """The policy was detached: its replicas' next grants and progress go out at once."""
        with self._lock:
            for lease in self._forwarded.pop((namespace, policy), {}):
                self._progress_sent.pop((namespace, lease), None)

    def take(self) -> _Reported:
        with self._lock:
            report, self._report = self._report, _Reported()
            report.sent_at = time.monotonic()
            return report


class _Answerer:
    def __init__(
        self, outbox: _Outbox, election: ElectionHost, fallback_writes_per_second: float = 0.0
    ) -> None:
        self._lock = threading.Lock()
        self._leases: dict[tuple[str, str], dict[str, Any]] = {}
        self._lead_until = -math.inf
        self._leader_address: str | None = None
        self._outbox = outbox
        self._election = election
        self.book = HeartbeatBook(
            leases=self.lease,
            leading=self._leading,
            leader_address=self._leader,
            tally=outbox,
            fallback_writes_per_second=fallback_writes_per_second,
        )
        self._clocks: dict[tuple[str, str], _RecordingClock] = {}

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._leases.get((namespace, name))

    def _leading(self) -> bool:
        if self._election.campaigning:
            return self._election.still_leading()
        return time.monotonic() < self._lead_until

    def _leader(self) -> str | None:
        return self._election.leader_address() if self._election.campaigning else self._leader_address

    def handle(self, message: tuple[Any, ...], replies: Connection) -> None:
        kind, *args = message
        if kind == "lease":
            event_type, lease = args
            meta = lease["metadata"]
            key = (str(meta.get("namespace") or ""), str(meta.get("name")))
            with self._lock:
                if event_type == "DELETED":
                    self._leases.pop(key, None)
                else:
                    self._leases[key] = lease
        elif kind == "attach":
            key = (args[0], args[1])
            clock = _RecordingClock(key, self._outbox, self.lease)
            self._clocks[key] = clock
            self.book.attach(*key, clock)
        elif kind == "detach":
            key = (args[0], args[1])
            if key in self._clocks:
                self.book.detach(*key, self._clocks.pop(key))
                self._outbox.forget(*key)
        elif kind == "published":
            self.book.note_published(*args)
        elif kind == "max_poll":
            self.book.note_max_poll_interval(*args)
        elif kind == "leading":
            self._lead_until, self._leader_address = args
        elif kind == "campaign":
            self._election.campaign(*args)
        elif kind == "stop_campaign":
            self._election.stop_campaign()
        elif kind == "release":
            self._election.release()
        elif kind == "may_fence":
            namespace, policy, lease, incarnation, version, duration_s = args
            replies.send(
                self.book.may_fence(
                    namespace, policy, lease, incarnation=incarnation, version=version, duration_s=duration_s
                )
            )
        elif kind == "fence_failed":
            namespace, lease, version = args
            self.book.fence_failed(namespace, lease, version=version)
        else:
            log.warning("heartbeat process: unknown message %r", kind)


class _ChildEnds(NamedTuple):
    """The answering process's ends of the four pipes."""

    commands: Connection
    replies: Connection
    reports: Connection
    election: Connection


def _answer(
    host: str, port: int, ends: _ChildEnds, pulse: PulseStamp, fallback_writes_per_second: float = 0.0
) -> None:
    """The answering process: serve until the operator's end of `commands` closes."""
    dump_stacks_on_usr1()  # a spawned child: the command's handler is not inherited
    logging.basicConfig(level=logging.INFO, format="%(asctime)s heartbeats %(levelname)s %(message)s")
    commands, replies, reports = ends.commands, ends.replies, ends.reports
    outbox = _Outbox()
    election_lock = threading.Lock()

    def tell_election(message: tuple[Any, ...]) -> None:
        with election_lock, contextlib.suppress(OSError):  # the operator gone: its pipe's end ends us
            ends.election.send(message)

    answerer = _Answerer(outbox, ElectionHost(tell_election, pulse), fallback_writes_per_second)
    try:
        server = HeartbeatServer(answerer.book, host, port, tally=outbox)
    except OSError as e:
        replies.send(("error", f"cannot answer heartbeats: {e.strerror} (--heartbeat-port {port})"))
        return
    server.start()
    replies.send(("ready", server.port))
    stop = threading.Event()

    def report() -> None:
        # This thread must outlive any one bad report: the operator judges no silence beyond the
        # last report it applied, so a report thread that died would stop every expiry.
        while not stop.wait(REPORT_EVERY_S):
            try:
                reports.send(outbox.take().wire())
            except OSError:
                return  # the operator is gone
            except Exception:
                log.exception("a heartbeat report could not be sent")

    threading.Thread(target=report, name="heartbeat-report", daemon=True).start()
    try:
        while True:
            try:
                message = commands.recv()
            except (EOFError, OSError):
                break  # the operator is gone: grant nothing more
            answerer.handle(message, replies)
    finally:
        stop.set()
        server.stop()
        os._exit(0)
