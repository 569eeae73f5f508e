"""The replica's Lease `<policy>-<identity>`: take it, renew it every second, report on it, fence.

Who calls it: the runtime (plan and native delivery). One background thread renews; the main
loop reads `valid_until` before and after every message and `floor` after every batch.

Protocol (the operator's side is `groupops.planner.handoff`; the format is `plan_format`):
1. acquire: a Lease with no holder, released on exit, or already ours is taken at once (compare-
   and-swap on its resourceVersion). One held by another process of this identity is taken only
   after this process has seen it unchanged for the lease duration, as leader election does, so
   a replacement never runs beside a zombie. The floor starts at the Lease's `released-through`
   and just below the epoch an earlier process acknowledged: a restarted replica never applies a
   plan older than what its identity acknowledged (docs/design.md §7.6). The operator creates the
   Lease; if it is missing and this process may create it (outside the operator), it does.
2. renew: every `renew_interval_s` (and at once after an acknowledgement, `kick`), write the
   report (acknowledged epoch, partitions owned, state) with compare-and-swap. A successful write
   *sent* at t makes the replica valid until t + renew_deadline (< the duration the operator
   waits), so a replica always stops consuming before the operator may judge it expired.
3. conflict: someone else wrote. If another incarnation holds it now, `lost` is set (the runtime
   stops everything and exits). If the operator fenced it (`released-through` above our floor),
   `floor` rises: the runtime drops everything and applies only plans newer than the floor. Then
   the write is retried on the fresh object.
4. release (on exit, after consuming stopped): holder cleared, state `released`, nothing owned,
   `released-through` = the newest epoch this process has seen, so the operator hands everything
   over at once instead of waiting for expiry.
5. surrender (the progress watchdog judged the replica stuck, consumer/progress.py): the process
   is no longer valid, at once, and sends no renewal any more (only the release of step 4, if
   it gets that far); the operator judges the Lease expired a lease duration after the last
   renewal it saw, as after a crash.

With heartbeat addresses (docs/design.md §7.5) the Lease says `liveness: heartbeat`, and step 2
changes: while the report is unchanged, the interval's renewal is a heartbeat to the operator
(no API write); a granted one makes the replica valid until its send time + the validity granted
(at most renew_deadline). A refused one is replaced by a Lease write (whose conflict reveals a
fence or a takeover, step 3); an unanswered one too, once the validity left no longer covers
another interval, heartbeat and write (`fallback_write_may_wait`), so the replica stays alive
while no operator answers and an election gap does not cost a write per replica per interval;
and in a fleet too large for the operator's write budget, only at this process's moment of the
spread its last grant named (`FallbackSpread`), so that the writes of a fleet that lost its
leader at once arrive at the budget's rate, not together (the replica pauses meanwhile). A
heartbeat carries the replica's progress (`progress`: seconds since its loop last
polled, since a position last advanced under lag, since the last commit); one refused as *stuck*
(that progress exceeds the policy's maxPollIntervalSeconds) is not followed by a Lease write: the
keeper surrenders (step 5) and tells the replica (`on_stuck`), as when its own watchdog fires, so
the replica falls silent and the operator fences it as any silent one. Step 1 changes too: a
Lease in heartbeat mode held by another process is taken only once the operator's fence names
that process (`fenced-incarnation`): the process could still hold grants this one cannot see.
"""

from __future__ import annotations

import copy
import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from groupops.consumer.heartbeat import HeartbeatClient
from groupops.consumer.kube import ReplicaKube
from groupops.consumer.settings import LeaseSettings
from groupops.kubeapi import AlreadyExists, Conflict, Forbidden, KubeError
from groupops.model import MemberId, TopicPartition
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import (
    FallbackSpread,
    Heartbeat,
    HeartbeatStatus,
    fallback_write_may_wait,
)
from groupops.planner.plan_format import (
    LEASE_ERRORS_ANNOTATION,
    LEASE_FENCED_INCARNATION_ANNOTATION,
    LEASE_LIVENESS_ANNOTATION,
    LEASE_RELEASED_THROUGH_ANNOTATION,
    LEASE_STOPPED_ANNOTATION,
    POLICY_LABEL,
    LeaseRecord,
    LeaseState,
    format_micro_time,
    lease_record,
    lease_record_annotations,
)
from groupops.planner.wire import LEASE_EPOCH_ANNOTATION

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class _Beat(enum.Enum):
    """How a heartbeat exchange ended."""

    GRANTED = "granted"
    REFUSED = "refused"  # by the leader: the Lease write that follows reveals a fence or a takeover
    UNANSWERED = "unanswered"  # no leader answered in time (down, or an election in progress)


class LeaseKeeper:
    """Holds one identity's Lease for one process (`incarnation`). Thread-safe reads of
    `valid_until`, `floor` and `lost`; `report` and `kick` may be called from any thread."""

    def __init__(
        self,
        kube: ReplicaKube,
        settings: LeaseSettings,
        *,
        name: str,
        policy: str,
        identity: str,
        incarnation: str,
        monotonic: Clock = time.monotonic,
        wall: Clock = time.time,
        seen_epoch: Callable[[], int] | None = None,
        progress: Callable[[], Mapping[str, float]] | None = None,
        on_stuck: Callable[[str], None] | None = None,
        phase: float | None = None,
    ) -> None:
        self._kube = kube
        self._seen_epoch = seen_epoch
        """The newest plan epoch the replica has seen, sent with heartbeats (plan delivery)."""
        self._progress = progress
        """The replica's progress, sent with heartbeats: called in this keeper's thread, so it
        must only read what other threads publish whole (or under their own lock)."""
        self._on_stuck = on_stuck
        """Called (in this keeper's thread, after surrendering) with the operator's reason when
        a heartbeat was refused as stuck."""
        self._settings = settings
        self.name = name
        self._policy = policy
        self.identity = identity
        self.incarnation = incarnation
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._heartbeats = (
            HeartbeatClient(settings.heartbeat_addresses, monotonic=monotonic)
            if settings.heartbeat_addresses
            else None
        )
        self._record = LeaseRecord(
            state=LeaseState.STARTING, incarnation=incarnation, heartbeats=self._heartbeats is not None
        )
        self._written_record: LeaseRecord | None = None
        self._refusal_logged = 0.0
        self._object: dict[str, Any] | None = None
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None
        self._last_sent = 0.0
        self._surrendered = False
        self.valid_until = 0.0
        """Monotonic time until which this process may consume (0: not valid)."""
        self.floor = -1
        """Plans with an epoch <= floor must not be applied (released or fenced through it)."""
        self.lapses = 0
        """Times validity ran out before a renewal or heartbeat sent later extended it again. A
        process frozen or cut off past its validity learns of the gap this way even when the
        first thing that runs after it is a granted heartbeat: its partitions may have moved
        in the gap, so the runtime must not commit or release them before it re-reads the
        plan (consumer/runtime.py)."""
        self.lost = False
        """Another incarnation took the Lease: stop everything and exit."""
        self.renewals = 0
        """Lease writes that renewed it (takes and reports included)."""
        self.heartbeats_granted = 0
        self.heartbeats_refused = 0
        self.heartbeats_unanswered = 0
        self.fallback_writes_waited = 0
        """Intervals in which no leader answered and the Lease write was left for later."""
        self.fallback_writes_spread = 0
        """Intervals in which no leader answered, the validity did not cover waiting, and the
        write waited for this process's moment of the spread (`fallback_write_at`)."""
        self._spread = FallbackSpread(phase=random.random() if phase is None else phase)
        """This process's moment within the spread its last grant named (none before a grant, or
        from an operator that sends none): the fleet's draws spread its writes."""
        self._held = False

    # -- what the runtime calls ---------------------------------------------------------------------

    def valid(self) -> bool:
        return not self.lost and self._monotonic() < self.valid_until

    def report(
        self,
        *,
        acked_epoch: int | None,
        partitions: tuple[TopicPartition, ...],
        state: LeaseState,
        stopped: Mapping[TopicPartition, int] | None = None,
        errors: Mapping[str, int] | None = None,
    ) -> None:
        """What the next renewal writes. The floor is carried along, never dropped. `stopped`:
        partitions stopped on a failing message; `errors`: the replica's error counts (None: as
        reported before, for both)."""
        with self._lock:
            kept = self._record.stopped if stopped is None else tuple(sorted(stopped.items()))
            counts = (
                self._record.errors
                if errors is None
                else tuple(sorted((k, v) for k, v in errors.items() if v > 0))
            )
            self._record = LeaseRecord(
                acked_epoch=acked_epoch,
                partitions=tuple(sorted(partitions)),
                state=state,
                released_through=None if self.floor < 0 else self.floor,
                incarnation=self.incarnation,
                heartbeats=self._heartbeats is not None,
                stopped=kept,
                errors=counts,
            )

    def kick(self) -> None:
        """Renew now (an acknowledgement should not wait up to a renewal interval)."""
        self._kick.set()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this process holds the Lease (True) or `stop` is set (False)."""
        clock = LeaseClock()
        waiting_logged = False
        while not stop.is_set():
            try:
                current = self._kube.get_lease(self.name)
                if current is None:
                    if self._create():
                        return True
                    continue
                if self._may_take(current, clock) and self._take(current):
                    return True
                if not waiting_logged:
                    holder = (current.get("spec") or {}).get("holderIdentity")
                    log.info(
                        "Lease %s is held by %s (another process); waiting for it to expire",
                        self.name,
                        holder,
                    )
                    waiting_logged = True
            except Forbidden as e:
                log.warning(
                    "cannot create Lease %s (%s); waiting for the operator to create it", self.name, e
                )
            except KubeError as e:
                log.warning("acquiring Lease %s failed: %s", self.name, e)
            stop.wait(min(0.5, self._settings.renew_interval_s))
        return False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.identity}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=self._settings.request_timeout_s * 2 + 1)
        if self._heartbeats is not None:
            self._heartbeats.close()

    def release(self, *, through: int, acked_epoch: int | None) -> bool:
        """Final write after consuming stopped: see the module's step 4. Stops renewing first.
        Returns whether the Lease now says released (False: the API was unreachable; the operator
        will judge the Lease expired instead)."""
        self.stop()
        if self.lost or not self._held:
            return False  # never taken (stopped while waiting): nothing of ours to release
        deadline = self._monotonic() + max(3.0, self._settings.request_timeout_s * 3)
        while self._monotonic() < deadline:
            with self._lock:
                floor = max(self.floor, through)
                record = LeaseRecord(
                    acked_epoch=acked_epoch,
                    partitions=(),
                    state=LeaseState.RELEASED,
                    released_through=floor,
                    incarnation=self.incarnation,
                )
            body = self._body(record, holder=None)
            if body is None:
                return False
            try:
                self._object = self._kube.update_lease(body)
            except Conflict:
                if not self._reread():
                    return False
                continue
            except KubeError as e:
                log.warning("releasing Lease %s failed: %s", self.name, e)
                time.sleep(0.2)
                continue
            log.info("released Lease %s through epoch %d", self.name, floor)
            return True
        return False

    def surrender(self) -> float:
        """Stop renewing for good and stop being valid now (step 5): the runtime then neither
        accepts nor commits anything. Any thread; does not wait for a renewal in flight.

        Returns the monotonic time by which the Lease has surely expired for everyone: the last
        write that may still reach the API server was sent at most then, it lands within one
        request timeout, and whoever saw it waits a lease duration from there."""
        with self._lock:
            self._surrendered = True
            self.valid_until = 0.0
            last_sent = self._last_sent
        self._stop.set()
        self._kick.set()
        log.warning("stopped renewing Lease %s", self.name)
        return last_sent + self._settings.request_timeout_s + self._settings.duration_s

    # -- the renewal thread -------------------------------------------------------------------------

    def _run(self) -> None:
        wait = self._settings.renew_interval_s
        while not self._stop.is_set():
            self._kick.wait(wait)
            self._kick.clear()
            wait = self._settings.renew_interval_s
            if self._stop.is_set():
                return
            if self._report_unchanged():
                beat = self._beat()
                if beat is _Beat.GRANTED:
                    # Only a grant earns the longer wait: an unanswered or refused heartbeat is
                    # retried at the renew interval's pace, the one fallback_write_may_wait
                    # counts on (design §7.5).
                    wait = self._settings.beat_interval_s
                    continue
                if beat is _Beat.UNANSWERED:
                    if self._fallback_may_wait():
                        continue
                    now = self._monotonic()
                    until_write = self._spread.until_write(now)
                    if until_write > 0:
                        self.fallback_writes_spread += 1
                        wait = min(wait, until_write)
                        continue
                    self._spread.wrote(now)
            if not self.renew_once() and not self._stop.is_set():
                # One quick retry: a single dropped request must not cost a whole interval.
                self._stop.wait(min(0.25, self._settings.renew_interval_s / 2))
                self.renew_once()

    def renew_once(self) -> bool:
        """One renewal attempt (compare-and-swap); True when the Lease was written."""
        for _ in range(2):  # the second pass follows a conflict, on the re-read object
            with self._lock:
                record = self._record
            body = self._body(record, holder=self.identity)
            if body is None:
                return False
            sent = self._sending()
            if sent is None:
                return False
            try:
                written = self._kube.update_lease(body)
            except Conflict:
                if not self._reread():
                    return False
                continue
            except KubeError as e:
                if self._failing_since is None:
                    self._failing_since = sent
                    log.warning("renewing Lease %s failed: %s", self.name, e)
                return False
            self._written(written, sent, record)
            return True
        return False

    def _report_unchanged(self) -> bool:
        with self._lock:
            return self._heartbeats is not None and self._record == self._written_record

    def beat_once(self) -> bool:
        """One heartbeat exchange; True when it was granted (the replica is valid for longer)."""
        return self._beat() is _Beat.GRANTED

    @property
    def _heartbeat_timeout_s(self) -> float:
        return min(self._settings.request_timeout_s, self._settings.renew_interval_s * 0.75)

    def _fallback_may_wait(self) -> bool:
        """No leader answered: leave the Lease write for a later interval while the validity
        covers it (`fallback_write_may_wait`); an election gap then costs the API server a write
        per replica only near the end of each one's grant, not one per interval."""
        with self._lock:
            valid_until = self.valid_until
        if not fallback_write_may_wait(
            now=self._monotonic(),
            valid_until=valid_until,
            interval_s=self._settings.renew_interval_s,
            heartbeat_timeout_s=self._heartbeat_timeout_s,
            write_timeout_s=self._settings.request_timeout_s,
        ):
            return False
        self.fallback_writes_waited += 1
        return True

    def _beat(self) -> _Beat:
        assert self._heartbeats is not None
        heartbeat = Heartbeat(
            namespace=self._kube.namespace,
            lease=self.name,
            incarnation=self.incarnation,
            seq=0,  # numbered by the client, datagram by datagram
            seen=None if self._seen_epoch is None else self._seen_epoch(),
            progress={} if self._progress is None else self._progress(),
        )
        result = self._heartbeats.exchange(
            heartbeat, timeout_s=self._heartbeat_timeout_s, on_send=self._sending
        )
        if result is None:
            self.heartbeats_unanswered += 1
            return _Beat.UNANSWERED
        answer, sent = result
        if answer.status is HeartbeatStatus.GRANTED:
            self._spread.granted(answer.spread)
            with self._lock:
                if not self._surrendered:
                    self._note_lapse(sent)
                    self.valid_until = max(
                        self.valid_until, sent + min(answer.valid, self._settings.renew_deadline_s)
                    )
            self.heartbeats_granted += 1
            return _Beat.GRANTED
        if answer.stuck:
            # The operator judged this replica stuck on the progress it reported: a Lease write
            # would keep it valid all the same, so none follows (docs/design.md §7.5).
            log.error("heartbeat for Lease %s refused: %s; surrendering the Lease", self.name, answer.reason)
            self.surrender()
            if self._on_stuck is not None:
                self._on_stuck(answer.reason)
            self.heartbeats_refused += 1
            return _Beat.REFUSED
        if sent - self._refusal_logged > 30:
            # Refused: the renewal that follows learns a fence or a takeover from its conflict.
            self._refusal_logged = sent
            log.info("heartbeat for Lease %s refused (%s); writing the Lease", self.name, answer.reason)
        self.heartbeats_refused += 1
        return _Beat.REFUSED

    def _note_lapse(self, sent: float) -> None:
        """Under the lock, before an extension sent at `sent`: the validity it extends had ended."""
        if 0.0 < self.valid_until <= sent:
            self.lapses += 1

    def _sending(self) -> float | None:
        """The send time of a write about to go out, noted for `surrender`; None once surrendered
        (nothing may be written then)."""
        with self._lock:
            if self._surrendered:
                return None
            self._last_sent = self._monotonic()
            return self._last_sent

    def _written(self, written: dict[str, Any], sent: float, record: LeaseRecord | None = None) -> None:
        with self._lock:
            self._object = written
            self._written_record = record
            self._held = True
            if not self._surrendered:
                self._note_lapse(sent)
                self.valid_until = sent + self._settings.renew_deadline_s
        self.renewals += 1
        if self._failing_since is not None:
            log.info("renewing Lease %s works again after %.1f s", self.name, sent - self._failing_since)
            self._failing_since = None

    def _reread(self) -> bool:
        """After a conflict: adopt the stored object, noting a fence or a takeover. False when
        this process must stop trying (the Lease is gone, taken, or unreadable)."""
        try:
            current = self._kube.get_lease(self.name)
        except KubeError as e:
            log.warning("re-reading Lease %s failed: %s", self.name, e)
            return False
        if current is None:
            log.warning("Lease %s was deleted; consuming stops until it is back", self.name)
            with self._lock:
                self._object = None
            self.valid_until = 0.0
            return False
        record = lease_record((current.get("metadata") or {}).get("annotations"))
        holder = (current.get("spec") or {}).get("holderIdentity")
        if record.incarnation not in (None, self.incarnation) or (holder and holder != self.identity):
            log.error("Lease %s is held by another process (%s) now", self.name, record.incarnation)
            self.lost = True
            self.valid_until = 0.0
            return False
        if record.released_through is not None and record.released_through > self.floor:
            log.warning(
                "Lease %s was fenced through epoch %d by the operator", self.name, record.released_through
            )
            self._raise_floor(record.released_through)
        with self._lock:
            self._object = current
        return True

    def _raise_floor(self, floor: int) -> None:
        with self._lock:
            self.floor = max(self.floor, floor)
            self._record = LeaseRecord(
                acked_epoch=self._record.acked_epoch,
                partitions=self._record.partitions,
                state=self._record.state,
                released_through=self.floor,
                incarnation=self.incarnation,
                heartbeats=self._record.heartbeats,
            )

    # -- acquiring ----------------------------------------------------------------------------------

    def _may_take(self, current: dict[str, Any], clock: LeaseClock) -> bool:
        spec = current.get("spec") or {}
        record = lease_record((current.get("metadata") or {}).get("annotations"))
        if record.released_through is not None:
            self._raise_floor(record.released_through)
        if record.acked_epoch is not None and record.incarnation != self.incarnation:
            # The operator granted partitions to others from this identity's acknowledgement: a
            # plan older than it (a restored ConfigMap, a stale read) may give back what was
            # since granted elsewhere. The new process resumes where the old one acknowledged.
            self._raise_floor(record.acked_epoch - 1)
        holder = spec.get("holderIdentity")
        if not holder or record.state is LeaseState.RELEASED or record.incarnation == self.incarnation:
            return True
        if record.heartbeats:
            return record.fenced_incarnation is not None and record.fenced_incarnation == record.incarnation
        # The holder's own renewals move renewTime; the operator's fence (an annotation) does
        # not, so a fence does not restart the wait.
        version = str(spec.get("renewTime") or (current.get("metadata") or {}).get("resourceVersion"))
        clock.observe(MemberId(self.identity), version, self._monotonic())
        duration = float(spec.get("leaseDurationSeconds") or self._settings.duration_s)
        return clock.expired(MemberId(self.identity), self._monotonic(), duration)

    def _take(self, current: dict[str, Any]) -> bool:
        with self._lock:
            self._object = current
            record = self._record
        body = self._body(record, holder=self.identity, acquiring=True)
        assert body is not None
        sent = self._sending()
        if sent is None:
            return False
        try:
            written = self._kube.update_lease(body)
        except Conflict:
            return False
        self._written(written, sent, record)
        log.info("took Lease %s (floor %d)", self.name, self.floor)
        return True

    def _create(self) -> bool:
        now = self._wall()
        with self._lock:
            record = self._record
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self._kube.namespace,
                "labels": {POLICY_LABEL: self._policy},
                "annotations": lease_record_annotations(record, self.identity),
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._settings.duration_s,
                "acquireTime": format_micro_time(now),
                "renewTime": format_micro_time(now),
                "leaseTransitions": 0,
            },
        }
        sent = self._sending()
        if sent is None:
            return False
        try:
            written = self._kube.create_lease(body)
        except (Conflict, AlreadyExists):
            return False
        self._written(written, sent, record)
        log.info("created and took Lease %s", self.name)
        return True

    def _body(
        self, record: LeaseRecord, *, holder: str | None, acquiring: bool = False
    ) -> dict[str, Any] | None:
        """The stored object with our fields set: labels, owner references and foreign
        annotations the operator put there are kept as they are."""
        with self._lock:
            if self._object is None:
                return None
            body = copy.deepcopy(self._object)
        now = format_micro_time(self._wall())
        metadata = body.setdefault("metadata", {})
        annotations = dict(metadata.get("annotations") or {})
        for key in (
            LEASE_EPOCH_ANNOTATION,
            LEASE_RELEASED_THROUGH_ANNOTATION,
            LEASE_LIVENESS_ANNOTATION,
            LEASE_FENCED_INCARNATION_ANNOTATION,  # our floor covers the fence: we read it first
            LEASE_STOPPED_ANNOTATION,
            LEASE_ERRORS_ANNOTATION,
        ):
            annotations.pop(key, None)
        annotations.update(lease_record_annotations(record, self.identity))
        metadata["annotations"] = annotations
        spec = body.setdefault("spec", {})
        if acquiring:
            if spec.get("holderIdentity") != holder:
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        if holder is None:
            spec.pop("holderIdentity", None)
        else:
            spec["holderIdentity"] = holder
        spec["leaseDurationSeconds"] = self._settings.duration_s
        spec["renewTime"] = now
        return body
