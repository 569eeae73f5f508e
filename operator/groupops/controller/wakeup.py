"""When a policy's reconcile runs between its ticks.

Each policy has one loop (a kopf daemon in `handlers`) that reconciles every tick, and sooner when:

- one of the policy's Leases changed in a way the plan depends on: its holder, or the report the
  replica writes on it (acknowledged epoch, partitions owned, release). A handoff step then
  follows an acknowledgement at once instead of at the next tick. Renewals alone do not wake the
  loop: they only move the operator's `LeaseClock`.
- a consumer container of the policy started or ended (its pod's status): a holder whose container
  exited is void at once (`planner/exits.py`), so its partitions move without waiting for silence.
- a held Lease runs out by the operator's clock (`LeaseClock.next_expiry`): the loop sleeps until
  exactly then, so a crashed replica is replaced one lease duration after its last renewal (or
  granted heartbeat), not up to a tick later. A heartbeat moves that moment without waking the
  loop: when the loop wakes at the old moment it finds nothing due and sleeps again; a parked
  loop does not even wake then, its `expiry_alarm` looks again on a plain timer. A moment the
  answering process has not reported up to yet is not due: the loop looks again shortly.

- its loop starts (a takeover, the operator's start) while one of its consumer containers started
  or ended within the last `RECENT_EXIT_S`: a crash the previous leader never handled may be
  among them, and the loop's first run must not queue behind the routine first runs of every
  other policy (`note_pods_at_start`).

A lag read that lands after its run stopped waiting for it (a slow source) is not a wake-up: it
asks for a run in the tick's routine lane at once (`note_lag_landed`), and never promotes a queued
routine run to the urgent lane. Under a slow source every policy's read lands late, and as
wake-ups they filled the urgent lane that failover needs.

The watch that feeds this runs in kopf's event loop; `Wakeup` is only touched from that loop.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from groupops.controller.render_pods import CONSUMER_CONTAINER
from groupops.planner.exits import container_boundary
from groupops.planner.handoff import LeaseClock

__all__ = [
    "EXPIRY_MARGIN_S",
    "RECENT_EXIT_S",
    "REPORT_RECHECK_S",
    "Wakeup",
    "exited_recently",
    "expiry_alarm",
    "expiry_due",
    "lease_fingerprint",
    "next_wake",
]

EXPIRY_MARGIN_S = 0.05
"""Wake this long after a Lease's expiry moment: the reconcile judges `now - changed > duration`."""

REPORT_RECHECK_S = 0.25
"""How soon a loop looks again at an expiry the answering process has not reported up to yet:
its reports come every 0.1 s, so a late one means a starved operator, and a loop that looked at
every report would add to the starvation (docs/design.md §7.5)."""

RECENT_EXIT_S = 60.0
"""A consumer container that started or ended this long before a policy's loop starts makes its
first run urgent. Longer than an election and the start of a large fleet's loops (about 30 s at
1,000 policies), with room for the node's clock against the operator's."""

_REPORT_PREFIX = "groupops.dev/"

LeaseFingerprint = tuple[str, tuple[tuple[str, str], ...]]


def lease_fingerprint(lease: Mapping[str, Any]) -> LeaseFingerprint:
    """What of a Lease the plan depends on: the holder and groupops' annotations (the replica's
    report and the operator's fence), not renewTime."""
    spec = lease.get("spec") or {}
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    report = tuple(sorted((k, str(v)) for k, v in annotations.items() if k.startswith(_REPORT_PREFIX)))
    return str(spec.get("holderIdentity") or ""), report


def next_wake(*, now: float, next_tick: float, clock: LeaseClock, judged_until: float) -> float:
    """The monotonic moment the loop must run by: the next tick, or just after the first held
    Lease that would expire after the last reconcile judged (`judged_until`). When that moment
    has passed but the answering process has not yet reported that far (`LeaseClock.follow`: its
    report is late, not the holder), the loop looks again `REPORT_RECHECK_S` later."""
    expiry = clock.next_expiry(after=judged_until)
    if expiry is None:
        return next_tick
    due = expiry + EXPIRY_MARGIN_S
    if due <= now and clock.judged_through(now) < due:
        return min(next_tick, now + REPORT_RECHECK_S)
    return max(now, min(next_tick, due))


def expiry_due(*, now: float, clock: LeaseClock, judged_until: float) -> bool:
    """A held Lease ran out after the last reconcile judged and before what the clock can judge
    at `now` (`LeaseClock.judged_through`)."""
    expiry = clock.next_expiry(after=judged_until)
    return expiry is not None and expiry + EXPIRY_MARGIN_S <= clock.judged_through(now)


def expiry_alarm(clock: LeaseClock, *, judged_until: float) -> asyncio.Future[None]:
    """A future of the running loop, resolved once a held Lease's expiry after `judged_until` is
    due (`expiry_due`). While heartbeats keep moving the expiry, a plain timer of the event loop
    looks again at the moment it would now be due (`next_wake`), so a parked policy's loop wakes
    only for an expiry that is due, not at every moment one was once due (docs/design.md §8.3,
    "a parked loop wakes for an expiry only when it is due"). Cancel it to stop the timer."""
    loop = asyncio.get_running_loop()
    fired: asyncio.Future[None] = loop.create_future()
    timer: list[asyncio.TimerHandle] = []

    def look() -> None:
        timer.clear()
        if fired.done():
            return
        now = time.monotonic()
        if expiry_due(now=now, clock=clock, judged_until=judged_until):
            fired.set_result(None)
            return
        wake = next_wake(now=now, next_tick=math.inf, clock=clock, judged_until=judged_until)
        if not math.isinf(wake):
            timer.append(loop.call_later(max(0.0, wake - now), look))

    def stop(_: asyncio.Future[None]) -> None:
        for handle in timer:
            handle.cancel()

    fired.add_done_callback(stop)
    look()
    return fired


@dataclass
class Wakeup:
    """One policy's wake-up signal and what it last saw of each Lease."""

    fingerprints: dict[str, LeaseFingerprint | None] = field(default_factory=dict)
    containers: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    """Pod name -> (UID, the consumer container's latest start or end) as last seen."""
    container_news: bool = False
    """A consumer container started or ended since the loop last took its news
    (`take_container_news`): the run it wakes starts before other urgent runs (§8.3)."""
    _event: asyncio.Event | None = None
    _lag_landed: asyncio.Event | None = None

    @property
    def event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()  # created in the loop that waits on it
        return self._event

    def note_lease(self, name: str, lease: Mapping[str, Any] | None) -> bool:
        """Record a Lease event (None: deleted); wake the loop if the plan depends on the change."""
        fingerprint = None if lease is None else lease_fingerprint(lease)
        known = name in self.fingerprints
        if known and self.fingerprints[name] == fingerprint:
            return False
        self.fingerprints[name] = fingerprint
        self.event.set()
        return True

    def note_pod(self, name: str, pod: Mapping[str, Any] | None) -> bool:
        """Record a Pod event (None: deleted); wake the loop when the consumer container started or
        ended since the last event: a Lease holder may have gone with it."""
        if pod is None:
            self.containers.pop(name, None)
            return False
        seen = (str((pod.get("metadata") or {}).get("uid")), container_boundary(pod, CONSUMER_CONTAINER))
        before = self.containers.get(name)
        self.containers[name] = seen
        if seen[1] is None or before == seen:
            return False
        self.container_news = True
        self.event.set()
        return True

    def note_pods_at_start(self, pods: Iterable[Mapping[str, Any]], *, now: float) -> bool:
        """Record the policy's pods as its loop starts; wake the loop (its first run goes to the
        urgent lane) when a consumer container of one of them started or ended within
        `RECENT_EXIT_S` before `now` (epoch seconds)."""
        recent = False
        for pod in pods:
            meta = pod.get("metadata") or {}
            boundary = container_boundary(pod, CONSUMER_CONTAINER)
            self.containers[str(meta.get("name"))] = (str(meta.get("uid")), boundary)
            recent = recent or _recent(boundary, now)
        if recent:
            self.container_news = True
            self.event.set()
        return recent

    def take_container_news(self) -> bool:
        """Whether a container started or ended since the last call (and forget it)."""
        news, self.container_news = self.container_news, False
        return news

    def poke(self) -> None:
        self.event.set()

    @property
    def lag_landed(self) -> asyncio.Event:
        """Set when a lag read landed after its run stopped waiting for it: news for a routine
        run, not a wake-up (docs/design.md §8.3, "a late lag read is routine news"). Only the
        loop clears it, as it takes the run."""
        if self._lag_landed is None:
            self._lag_landed = asyncio.Event()
        return self._lag_landed

    def note_lag_landed(self) -> None:
        self.lag_landed.set()

    async def wait_until(self, moment: float, *, interrupts: Iterable[asyncio.Future[Any]] = ()) -> bool:
        """Sleep until the monotonic `moment` (inf: no limit), a wake-up, or one of `interrupts`
        completing (the daemon being stopped, a run finishing), whichever is first; True if woken.
        A wake-up that came while the loop was busy is not lost: it ends the next wait at once."""
        timeout = None if math.isinf(moment) else max(0.0, moment - time.monotonic())
        waiter = asyncio.ensure_future(self.event.wait())
        pending = {waiter, *interrupts}
        done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            return False
        self.event.clear()
        return True


def exited_recently(pods: Iterable[Mapping[str, Any]], *, now: float) -> bool:
    """A consumer container of one of `pods` started or ended within `RECENT_EXIT_S` before `now`
    (epoch seconds), by the pod's status."""
    return any(_recent(container_boundary(pod, CONSUMER_CONTAINER), now) for pod in pods)


def _recent(boundary: float | None, now: float) -> bool:
    return boundary is not None and now - boundary <= RECENT_EXIT_S
