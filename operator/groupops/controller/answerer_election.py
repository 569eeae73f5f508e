"""The operator's leader election kept by the answering process (docs/design.md §8.1).

Why: in the operator's main process the renewal thread shares one interpreter with kopf, the
reconcile workers and the lag readers. At 1,000 busy policies on a saturated 2-core machine it
could not finish a renewal within the renew deadline, and the operator lost its own election
while it was healthy. The answering process (`controller.heartbeat_process`) runs a handful of
threads, so there a renewal waits for the interpreter milliseconds, not seconds.

Two halves, one per process, talking over the answerer's pipes:

    main process        `AnswererElection`: what `controller.main` and the reconciles ask of an
                        elector (`acquire`, `still_leading`, `term`, `valid_until`, `release`,
                        `start_renewing`'s `on_lost`); it stamps a `PulseStamp` every
                        `PULSE_EVERY_S`
    answering process   `ElectionHost`: a `LeaderElector` on a client of its own, which campaigns,
                        renews, and reports ("elected", term, until), ("valid", until) after
                        every renewal, ("lost", reason), ("released",), and each API request
                        it sends ("request", verb, kind), for the operator's request metric

The rules that keep one leader:

- The Lease stands for the whole operator, so the host renews only while the main process is
  heard (`MainProcessWatch`): a pulse at most `PULSE_TIMEOUT_S` old, or, while the main process
  is using CPU (its /proc stat moves), one at most `STARVED_PULSE_LIMIT_S` old. A frozen main
  process (stopped, or blocked with no thread running) lets the Lease run out `PULSE_TIMEOUT_S`
  after its last pulse, a busy one that never pulses (a thread spinning with the interpreter)
  `STARVED_PULSE_LIMIT_S` after it, and a starved one keeps its Lease (design §8.1).
- The main process acts as leader only until the deadline it was last told, on its own reading
  of CLOCK_MONOTONIC (the same clock in both processes). A late report can only end its
  leadership early, never extend it; the answerer's book grants heartbeats on the elector's own
  deadline, which is never later.
- A lost election ends the operator (`on_lost`), as before; the answerer's death ends it too
  (`HeartbeatProcess.on_lost`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from typing import Any

from groupops.controller.leader import LeaderElector, LeadershipLost
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import KubeClient, KubeError

__all__ = [
    "PULSE_EVERY_S",
    "PULSE_TIMEOUT_S",
    "STARVED_PULSE_LIMIT_S",
    "AnswererElection",
    "ElectionHost",
    "MainProcessWatch",
    "PulseStamp",
    "cpu_ticks",
]

log = logging.getLogger(__name__)

PULSE_EVERY_S = 0.25
PULSE_TIMEOUT_S = 2.0
"""The host renews while the main process's last pulse is this recent. Eight pulses: a frozen main
process costs a takeover at most this much more than a frozen pod (docs/design.md §8.1)."""
STARVED_PULSE_LIMIT_S = 10.0
"""...and while it is this recent and the main process used CPU within the last `PULSE_TIMEOUT_S`:
a main process that works but whose pulse thread waits for the interpreter is starved, not
frozen. The bound is what a thread that spins with the interpreter for ever costs a takeover."""

RELEASE_WAIT_S = 5.0
REPORT_EVERY_S = 0.05
"""How often the host looks for a new deadline to report (a renewal moves it every renewal period)."""


class PulseStamp:
    """The main process's last pulse (CLOCK_MONOTONIC, the same clock in both processes), in a
    double shared by the two: a pulse is one store, with no pipe, lock or queue in its way, so
    it is late only when its thread waits for the interpreter. Made before the answering process
    is spawned, and handed to it with the process's arguments."""

    def __init__(self, context: SpawnContext) -> None:
        self._value = context.RawValue("d", time.monotonic())

    def beat(self) -> None:
        self._value.value = time.monotonic()

    def last(self) -> float:
        return float(self._value.value)


def cpu_ticks(pid: int) -> int | None:
    """The CPU time process `pid` has used (user and system, in clock ticks), or None when its
    /proc entry cannot be read (gone, or no /proc: then only the pulse counts)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15 of proc(5)
    except (OSError, IndexError, ValueError):
        return None


class MainProcessWatch:
    """Whether the main process is heard (design §8.1, "a starved main process keeps the
    Lease"). `silence()` is None while it is, else why not; it is asked before every renewal, and
    each call samples the main process's CPU time, so "used CPU recently" is judged at the
    renewal period's resolution."""

    def __init__(
        self,
        pulse_at: Callable[[], float],
        cpu: Callable[[], int | None],
        *,
        pulse_timeout_s: float = PULSE_TIMEOUT_S,
        starved_limit_s: float = STARVED_PULSE_LIMIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pulse_at = pulse_at
        self._cpu = cpu
        self._pulse_timeout_s = pulse_timeout_s
        self._starved_limit_s = max(starved_limit_s, pulse_timeout_s)
        self._clock = clock
        self._ticks = cpu()
        self._worked_at = clock()
        self.starved = False
        """Whether the last judgement kept the Lease on CPU time alone (for the log)."""

    def silence(self) -> str | None:
        now = self._clock()
        ticks = self._cpu()
        if ticks is not None and ticks != self._ticks:
            self._ticks, self._worked_at = ticks, now
        silent = now - self._pulse_at()
        self.starved = False
        if silent < self._pulse_timeout_s:
            return None
        idle = now - self._worked_at
        if ticks is None:
            return f"the operator's main process has been silent for {silent:.1f} s"
        if idle >= self._pulse_timeout_s:
            return (
                f"the operator's main process has been silent for {silent:.1f} s and has used no "
                f"CPU for {idle:.1f} s (frozen)"
            )
        if silent >= self._starved_limit_s:
            return (
                f"the operator's main process has been silent for {silent:.1f} s while using CPU "
                f"(limit {self._starved_limit_s:g} s for a starved one)"
            )
        self.starved = True
        return None


class ElectionHost:
    """The answering process's side. `send` writes one message to the main process's election
    pipe; every method is called from the answerer's command loop."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], pulse: PulseStamp) -> None:
        self._send = send
        self._pulse = pulse
        self._elector: LeaderElector | None = None
        self._stop = threading.Event()
        self._watch: MainProcessWatch | None = None

    def still_leading(self) -> bool:
        return self._elector is not None and self._elector.still_leading()

    def leader_address(self) -> str | None:
        return None if self._elector is None else self._elector.leader_address

    @property
    def campaigning(self) -> bool:
        return self._elector is not None

    def campaign(
        self,
        settings: ElectionSettings,
        advertise: str | None,
        pulse_timeout_s: float,
        starved_limit_s: float,
    ) -> None:
        """Campaign, then renew while the main process is heard: the CPU time of this process's
        parent, the operator, tells a starved one from a frozen one."""
        try:
            client = KubeClient.from_environment(pool_size=4)
        except KubeError as e:
            self._send(("error", str(e)))
            return
        client.count_requests(lambda verb, kind: self._send(("request", verb, kind)))
        self._elector = LeaderElector(client, settings, advertise=advertise)
        pid = os.getppid()
        self._watch = MainProcessWatch(
            self._pulse.last,
            lambda: cpu_ticks(pid),
            pulse_timeout_s=pulse_timeout_s,
            starved_limit_s=starved_limit_s,
        )
        threading.Thread(target=self._run, args=(self._elector,), name="election", daemon=True).start()

    def stop_campaign(self) -> None:
        self._stop.set()

    def release(self) -> None:
        self._stop.set()
        if self._elector is not None:
            self._elector.release()
        self._send(("released",))

    def _main_process_heard(self) -> str | None:
        assert self._watch is not None
        was_starved = self._watch.starved
        silence = self._watch.silence()
        if self._watch.starved and not was_starved:
            log.warning(
                "renewing the election Lease while the operator's main process is starved: no "
                "pulse for %.1f s, but it is using CPU",
                time.monotonic() - self._pulse.last(),
            )
        return silence

    def _lost(self, reason: str) -> None:
        self._stop.set()
        self._send(("lost", reason))

    def _run(self, elector: LeaderElector) -> None:
        try:
            if not elector.acquire(self._stop):
                return
        except Exception as e:  # the campaign retries API errors itself; anything else ends it
            self._send(("error", f"the campaign failed: {e}"))
            return
        reported = elector.valid_until()
        self._send(("elected", elector.term, reported))
        elector.start_renewing(self._lost, may_renew=self._main_process_heard)
        while not self._stop.wait(REPORT_EVERY_S):
            until = elector.valid_until()
            if until > reported:
                self._send(("valid", until))
                reported = until


class AnswererElection:
    """The main process's side: an elector whose campaign and renewals run in the answering
    process. `send(*message)` writes to the answerer's command pipe; `reports` is the read end
    of its election pipe."""

    def __init__(
        self,
        send: Callable[..., None],
        reports: Connection,
        pulse: PulseStamp,
        settings: ElectionSettings,
        advertise: str | None,
        *,
        pulse_timeout_s: float = PULSE_TIMEOUT_S,
        starved_limit_s: float = STARVED_PULSE_LIMIT_S,
        count_request: Callable[[str, str], None] | None = None,
    ) -> None:
        self._send = send
        self._stamp = pulse
        self._count_request = count_request
        self._reports = reports
        self._settings = settings
        self._lock = threading.Lock()
        self._valid_until = 0.0
        self._elected = threading.Event()
        self._released = threading.Event()
        self._pulsing = threading.Event()
        self._pulsing.set()
        self._on_lost: Callable[[str], None] | None = None
        self._ended: str | None = None
        """Why the election ended (lost, or the host failed), once it has."""
        self._stepped_down = False
        """`release` was called: what ends the election after it (the host stopping on shutdown)
        is no loss, and `on_lost` is not called for it."""
        self.term = 0
        threading.Thread(target=self._receive, name="election-reports", daemon=True).start()
        threading.Thread(target=self._pulse, name="election-pulse", daemon=True).start()
        send("campaign", settings, advertise, pulse_timeout_s, starved_limit_s)

    @property
    def identity(self) -> str:
        return self._settings.identity

    def still_leading(self) -> bool:
        with self._lock:
            return time.monotonic() < self._valid_until

    def valid_until(self) -> float:
        with self._lock:
            return self._valid_until

    def acquire(self, stop: threading.Event) -> bool:
        """Block until the host leads (True) or `stop` is set (False). Raises LeadershipLost
        when the host cannot campaign at all."""
        while not stop.is_set():
            if self._elected.wait(0.25):
                return True
            if self._ended is not None:
                raise LeadershipLost(self._ended)
        self._send("stop_campaign")
        return False

    def start_renewing(self, on_lost: Callable[[str], None]) -> None:
        """The host renews from its election on; `on_lost(reason)` runs once when it ends."""
        with self._lock:
            self._on_lost = on_lost
            ended = self._ended
        if ended is not None:
            on_lost(ended)

    def halt(self) -> None:
        """Stop the pulses, as a main process whose pulse thread never gets the interpreter would:
        the host renews on while this process uses CPU, up to the starved limit."""
        self._pulsing.clear()

    def release(self) -> None:
        """Step down (on shutdown): the host clears the holder so a standby takes over at once."""
        self._pulsing.clear()
        with self._lock:
            self._valid_until = 0.0
            self._stepped_down = True
        self._send("release")
        if not self._released.wait(RELEASE_WAIT_S):
            log.warning("the answering process did not step down within %.0f s", RELEASE_WAIT_S)

    def _pulse(self) -> None:
        while True:
            self._pulsing.wait()
            self._stamp.beat()
            time.sleep(PULSE_EVERY_S)

    def _receive(self) -> None:
        while True:
            try:
                kind, *args = self._reports.recv()
            except (EOFError, OSError):
                self._end("the answering process is gone")  # its own on_lost ends the operator
                return
            if kind == "elected":
                self.term = int(args[0])
                with self._lock:
                    self._valid_until = float(args[1])
                self._elected.set()
            elif kind == "valid":
                with self._lock:
                    self._valid_until = max(self._valid_until, float(args[0]))
            elif kind in ("lost", "error"):
                self._end(str(args[0]))
            elif kind == "released":
                self._released.set()
            elif kind == "request" and self._count_request is not None:
                self._count_request(*args)  # the main process's API request metric counts them too

    def _end(self, reason: str) -> None:
        with self._lock:
            self._valid_until = 0.0
            if self._ended is not None:
                return
            self._ended = reason
            on_lost = None if self._stepped_down else self._on_lost
        if on_lost is not None:
            on_lost(reason)
