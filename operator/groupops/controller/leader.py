"""Leader election for the operator: one coordination Lease, one leader, a standby that takes over.

Who calls it: `controller.main.run_operator`, before anything reconciles. Every replica of the
operator (the chart runs two) campaigns for the Lease `<name>` in its namespace; the one holding
it runs kopf, the others wait. The rules are client-go's leader election (docs/design.md §8):

- A candidate takes the Lease when nobody holds it, or when it has seen the Lease unchanged (same
  resourceVersion) for `lease_seconds` by its *own* monotonic clock: no wall clocks are compared,
  so skew between nodes does not matter, only how fast their clocks run.
- A standby *watches* the Lease (fieldSelector metadata.name; design §8.1) and notes when each
  version reached it; it reads the Lease (a GET) only once the version it saw last is
  `lease_seconds` old, or nobody holds it: while the leader renews, a standby costs the API
  server no request but its watch. When its watch is not synced, or a GET shows a version the
  watch has not (a stalled watch), it polls every `retry_seconds` as before, until the watch
  shows something new again.
- Every take and every renewal is a compare-and-swap on the resourceVersion it read, so two
  candidates never both win; a take from another holder increments `leaseTransitions`, which
  is the leader's *term*: strictly increasing across leaders, recorded with every plan it
  publishes (`controller.render_plan`), so a deposed leader's late write can be recognised.
- The leader starts a renewal every `renew_seconds` after one that succeeded, every
  `retry_seconds` after one that failed or was skipped (at once after one that took longer). It
  counts as leading only until `renew_deadline_seconds` after the *send* time of its last
  successful renewal (`still_leading`), which ends before any candidate can judge the Lease
  expired (`renew_deadline_seconds < lease_seconds`). When that passes, or a renewal finds
  another holder, leadership is lost: `on_lost` runs (the operator exits at once, as client-go's
  callers do, and its pod restarts as a standby).

Errors: API failures while campaigning are logged with their attempt number and retried; they
never end the process. Stepping down on SIGTERM clears the holder so the standby takes over
without waiting out the Lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from groupops.controller.cache import WatchCache
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import AlreadyExists, Conflict, KubeClient, KubeError, NotFound

__all__ = ["HEARTBEAT_ADDRESS_ANNOTATION", "Elector", "LeaderElector", "LeadershipLost"]

log = logging.getLogger(__name__)

_API = "coordination.k8s.io/v1"
HEARTBEAT_ADDRESS_ANNOTATION = "groupops.dev/heartbeat-address"
"""On the election Lease: where the leader answers consumer heartbeats, so that a standby can
send a replica that asked it to the leader (controller/heartbeats.py)."""


class _Synced(Protocol):
    """What the campaign asks of its watch (`WatchCache`)."""

    def synced(self) -> bool: ...


class Elector(Protocol):
    """What `controller.main` asks of an election: `LeaderElector` in the operator's process, or
    `controller.answerer_election.AnswererElection` kept by the answering process (§8.1)."""

    term: int

    @property
    def identity(self) -> str: ...

    def still_leading(self) -> bool: ...

    def valid_until(self) -> float: ...

    def acquire(self, stop: threading.Event) -> bool: ...

    def start_renewing(self, on_lost: Callable[[str], None]) -> None: ...

    def release(self) -> None: ...


class LeadershipLost(Exception):
    """This operator no longer leads: another holder took the Lease, or it could not renew."""


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renewal_period(settings: ElectionSettings, took_s: float) -> float:
    """Seconds from the start of a renewal that succeeded in `took_s` to the next one's: the
    steady period, shortened so that a next renewal taking twice as long still ends before the
    deadline of this one, and never below the retry period."""
    room = settings.renew_deadline_seconds - 2 * took_s
    return max(settings.retry_seconds, min(settings.renew_period, room))


class LeaderElector:
    """Campaign (`acquire`), then keep the Lease (`start_renewing`) until `release` or loss."""

    def __init__(
        self,
        client: KubeClient,
        settings: ElectionSettings,
        *,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        advertise: str | None = None,
    ) -> None:
        self._client = client
        self._advertise = advertise
        self._settings = settings
        self._wall_clock = wall_clock
        self._seen: tuple[str, float] | None = None
        self._valid_until = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease: dict[str, Any] | None = None
        """The Lease as last written by this elector: renewals compare-and-swap on it."""
        self._holder_seen: str | None = None
        self._watched: tuple[str, str] | None = None
        """(resourceVersion, holder) of the Lease as the standby's watch last showed it."""
        self._watch_behind = True
        """The last GET showed a version the watch had not shown (or nothing was watched yet)."""
        self._watch_news = threading.Event()
        self.term = 0
        self.leader_address: str | None = None
        """Where the current leader answers heartbeats, as its Lease last said."""

    @property
    def identity(self) -> str:
        return self._settings.identity

    def still_leading(self) -> bool:
        with self._lock:
            return time.monotonic() < self._valid_until

    def valid_until(self) -> float:
        """The monotonic moment this replica stops leading unless it renews (0 while standing by)."""
        with self._lock:
            return self._valid_until

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this replica leads (True) or `stop` is set (False)."""
        settings = self._settings
        watch = WatchCache(
            self._client,
            _API,
            "Lease",
            namespaces=(settings.namespace,),
            field_selector=f"metadata.name={settings.name}",
        )
        watch.add_listener(self._heard)
        watch.start()
        try:
            return self._campaign(stop, watch)
        finally:
            watch.stop(join=0.0)

    def _campaign(self, stop: threading.Event, watch: _Synced) -> bool:
        attempt = 0
        announced = False
        while not stop.is_set():
            attempt += 1
            try:
                if self._try_take():
                    log.info(
                        "leading as %s (term %d, Lease %s/%s)",
                        self.identity,
                        self.term,
                        self._settings.namespace,
                        self._settings.name,
                    )
                    return True
                if not announced:
                    log.info("standing by: %s leads", self._holder_seen or "someone else")
                    announced = True
            except KubeError as e:
                log.warning("leader election attempt %d failed: %s", attempt, e)
            self._wait_to_look(stop, watch)
        return False

    def _heard(self, event_type: str, lease: dict[str, Any]) -> None:
        """The watch's event (its own thread): a new version is seen from this moment."""
        if event_type == "DELETED":
            watched = ("", "")
            self.leader_address = None
        else:
            watched = (str(lease["metadata"].get("resourceVersion")), self._note_holder(lease))
        with self._lock:
            self._watched = watched
            self._watch_behind = False
            if watched[0] and (self._seen is None or self._seen[0] != watched[0]):
                self._seen = (watched[0], time.monotonic())
        self._watch_news.set()

    def _look_in(self, watch: _Synced, polled_at: float) -> float:
        """Seconds until the next GET is worth sending (<= 0: now)."""
        now = time.monotonic()
        with self._lock:
            watched, seen, behind = self._watched, self._seen, self._watch_behind
        if not watch.synced() or behind or watched is None:
            return polled_at + self._settings.retry_seconds - now
        version, holder = watched
        if not version or not holder or seen is None or seen[0] != version:
            return 0.0  # deleted, stepped down, or a version not timed yet
        return seen[1] + self._settings.lease_seconds - now

    def _wait_to_look(self, stop: threading.Event, watch: _Synced) -> None:
        polled_at = time.monotonic()
        while not stop.is_set():
            wait = self._look_in(watch, polled_at)
            if wait <= 0:
                return
            # woken by every event of the watch (a step-down is news), and at least every
            # retry period to notice a watch that fell out of sync
            self._watch_news.wait(min(wait, self._settings.retry_seconds))
            self._watch_news.clear()

    def start_renewing(
        self, on_lost: Callable[[str], None], *, may_renew: Callable[[], str | None] | None = None
    ) -> None:
        """Renew in a daemon thread; call `on_lost(reason)` once when leadership ends.
        `may_renew()` is asked before every renewal: a reason (a string) skips it, so that the
        Lease runs out when what it stands for has stopped (the answering process renews only
        while the operator's main process is heard, `controller.answerer_election`)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_loop, args=(on_lost, may_renew), name="leader", daemon=True
        )
        self._thread.start()

    def halt(self) -> None:
        """Stop renewing without stepping down, as a crashed or frozen leader would."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def release(self) -> None:
        """Step down (on shutdown): clear the holder so a standby takes over at once."""
        self._stop.set()
        with self._lock:
            self._valid_until = 0.0
        renewing = self._thread
        if renewing is not None and renewing is not threading.current_thread():
            # A renewal in flight would move the Lease under the step-down's compare-and-swap,
            # and a refused step-down makes the standby wait the Lease out.
            renewing.join(timeout=self._settings.renew_deadline_seconds)
        try:
            lease = self._client.get(_API, "Lease", self._settings.namespace, self._settings.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec["holderIdentity"] = ""
            self._client.replace({**lease, "spec": spec})
            log.info("stepped down as leader (term %d)", self.term)
        except KubeError as e:
            log.warning("could not step down cleanly (the standby waits out the Lease): %s", e)

    # -- internals --------------------------------------------------------------------------------

    def _try_take(self) -> bool:
        settings = self._settings
        sent = time.monotonic()
        lease = self._client.get(_API, "Lease", settings.namespace, settings.name)
        now_wall = _micro_time(self._wall_clock())
        if lease is None:
            body = {
                "apiVersion": _API,
                "kind": "Lease",
                "metadata": {
                    "name": settings.name,
                    "namespace": settings.namespace,
                    "annotations": self._annotations(None),
                },
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": max(1, round(settings.lease_seconds)),
                    "acquireTime": now_wall,
                    "renewTime": now_wall,
                    "leaseTransitions": 0,
                },
            }
            try:
                created = self._client.create(body)
            except AlreadyExists:
                return False
            self._won(term=0, sent=sent, lease=created)
            return True
        spec = lease.get("spec") or {}
        holder = self._note_holder(lease)
        self._holder_seen = holder or None
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        version = str(lease["metadata"]["resourceVersion"])
        with self._lock:
            self._watch_behind = self._watched is None or self._watched[0] != version
            if self._seen is None or self._seen[0] != version:
                self._seen = (version, sent)
                fresh = True
            else:
                fresh = sent - self._seen[1] < settings.lease_seconds
        if holder and holder != self.identity and fresh:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        term = transitions if holder == self.identity else transitions + 1
        new_spec = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(settings.lease_seconds)),
            "renewTime": now_wall,
            "leaseTransitions": term,
        }
        if holder != self.identity:
            new_spec["acquireTime"] = now_wall
        metadata = {**lease["metadata"], "annotations": self._annotations(annotations)}
        try:
            taken = self._client.replace({**lease, "metadata": metadata, "spec": new_spec})
        except (Conflict, NotFound):
            with self._lock:
                self._seen = None
                self._watch_behind = True  # look again with a GET at the next retry
            return False
        self._won(term=term, sent=sent, lease=taken)
        return True

    def _note_holder(self, lease: dict[str, Any]) -> str:
        """The Lease's holder ("" when unheld); `leader_address` becomes where it answers."""
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        self.leader_address = annotations.get(HEARTBEAT_ADDRESS_ANNOTATION) if holder else None
        return holder

    def _annotations(self, current: dict[str, str] | None) -> dict[str, str]:
        annotations = dict(current or {})
        annotations.pop(HEARTBEAT_ADDRESS_ANNOTATION, None)
        if self._advertise:
            annotations[HEARTBEAT_ADDRESS_ANNOTATION] = self._advertise
        return annotations

    def _won(self, *, term: int, sent: float, lease: dict[str, Any]) -> None:
        self.term = term
        self._lease = lease
        self.leader_address = self._advertise
        with self._lock:
            self._valid_until = sent + self._settings.renew_deadline_seconds

    def _renew_once(self) -> None:
        """One renewal (one write, compare-and-swap on the Lease last written); raises
        LeadershipLost when another holder has the Lease."""
        settings = self._settings
        sent = time.monotonic()
        lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            lease = self._client.get(_API, "Lease", settings.namespace, settings.name)
            if lease is None:
                raise LeadershipLost("the election Lease was deleted")
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity or int(spec.get("leaseTransitions") or 0) != self.term:
            raise LeadershipLost(f"the election Lease is held by {spec.get('holderIdentity')!r} now")
        renewed: dict[str, Any] = {**lease, "spec": {**spec, "renewTime": _micro_time(self._wall_clock())}}
        try:
            self._lease = self._client.replace(renewed)
        except Conflict:
            self._lease = None  # someone else wrote it: who holds it now?
            current = self._client.get(_API, "Lease", settings.namespace, settings.name)
            holder = ((current or {}).get("spec") or {}).get("holderIdentity")
            if holder != self.identity:
                raise LeadershipLost(f"the election Lease is held by {holder!r} now") from None
            raise
        except NotFound as e:
            raise LeadershipLost("the election Lease was deleted") from e
        with self._lock:
            self._valid_until = sent + settings.renew_deadline_seconds

    def _renew_loop(self, on_lost: Callable[[str], None], may_renew: Callable[[], str | None] | None) -> None:
        attempt = 0
        # The first renewal is paced from the take (or the renewal) that won: from its send, as
        # if it had taken all the time since.
        with self._lock:
            started = self._valid_until - self._settings.renew_deadline_seconds
        period = renewal_period(self._settings, time.monotonic() - started)
        # Paced by the attempts' starts, not their ends: a renewal that took most of a period is
        # followed by the next one at once, so a slow API server shortens the validity left by
        # its latency once, not twice (the next renewal's validity counts from its own send).
        # After one that failed or was skipped the next comes a retry period later, so the
        # deadline still leaves several attempts; after a slow one, sooner than the steady
        # period (`renewal_period`; design §8.1, "the leader renews every 2 s").
        while not self._stop.wait(max(0.0, started + period - time.monotonic())):
            started = time.monotonic()
            period = self._settings.retry_seconds
            refusal = None if may_renew is None else may_renew()
            try:
                if refusal is not None:
                    log.warning("not renewing the election Lease: %s", refusal)
                else:
                    self._renew_once()
                    attempt = 0
                    took = time.monotonic() - started
                    period = renewal_period(self._settings, took)
                    if period < self._settings.renew_period:  # the API server (or this process) is slow
                        log.warning(
                            "slow election renewal: %.1f s (renew deadline %g s): the next in %.1f s",
                            took,
                            self._settings.renew_deadline_seconds,
                            period,
                        )
            except LeadershipLost as e:
                with self._lock:
                    self._valid_until = 0.0
                on_lost(str(e))
                return
            except KubeError as e:
                attempt += 1
                log.warning("leader renewal attempt %d failed: %s", attempt, e)
            if not self._stop.is_set() and not self.still_leading():
                why = f" ({refusal})" if refusal is not None else ""
                on_lost(f"no renewal succeeded within {self._settings.renew_deadline_seconds:g}s{why}")
                return
