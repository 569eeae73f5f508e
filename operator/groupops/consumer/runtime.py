"""The plan-following consumer (`delivery: plan`): consume exactly the partitions the operator's
plan gives this identity, hand them over safely, and stop everything when the Lease is gone.

Who calls it: `groupops consume` (commands/consume.py), one process per identity (pod).

The main loop, one thread, owns the Kafka consumer (confluent-kafka, manual assignment):
1. Lease lost to another process -> drop everything, exit with LeaseLostError.
2. Active but the Lease is no longer valid (the last renewal was sent more than the renew
   deadline ago), or valid again after it had run out (a process frozen or cut off past its
   validity, woken by a granted heartbeat: `LeaseKeeper.lapses`; its partitions may have moved
   meanwhile, so its old positions are never committed), or the operator fenced it ->
   *self-fence*: unassign everything without
   committing (the work since the last commit is done again by the next owner), report nothing
   owned, and wait. When the Lease is renewed again, re-read the plan ConfigMap and apply the
   newest plan above the Lease's floor.
3. A newer plan epoch -> apply it: for partitions leaving the set, pause (stop fetching), commit
   what was processed synchronously, `incremental_unassign`; for partitions entering,
   `incremental_assign` from the committed offset (`auto.offset.reset` when there is none);
   then acknowledge the epoch and the partitions owned on the Lease (renewed at once).
4. Consume a batch. Before each message (or batch) the Lease must be valid; the offset is stored
   only after the callback returned *and* the Lease was still valid then (at-least-once; a
   callback that outlived the Lease is not accepted and runs again at the next owner).
5. Every `commit_interval_s`, commit the stored offsets asynchronously.

On stop (SIGTERM): commit synchronously, unassign everything, release the Lease (nothing owned,
released through the newest epoch seen), close. A graceful stop therefore hands over at once.

A replica that keeps proving it is alive (heartbeats or Lease renewals) but makes no progress
is failed over, as Kafka's max.poll.interval.ms does for group members. The progress watchdog
(consumer/progress.py, its own thread) judges it *stuck* when, for `maxPollIntervalSeconds` and
while it owns partitions, (a) the loop above has not come back to poll (a callback or a commit
blocks), or (b) owned partitions have lag (processed position below the high watermark, read
with a real broker round trip every 1-5 s by the watchdog's own Kafka client,
`brokerprobe.BrokerProbe`) and no owned position advanced, or (c) no broker round trip succeeded
(the pod reaches the API server but not Kafka). An idle topic without lag is never stuck. A
batch (`batch_size` messages) must therefore be processed within the interval. Then:
- it logs which rule fired and for how long, counts `groupops_consumer_stuck_total`, journals a
  fence, and stops its heartbeats and renewals (`replica.surrender_when_stuck`): the Lease is
  invalid from that moment, no offset is stored or committed any more, `owns()` says no, and
  the loop (if it still runs) fences itself;
- the operator judges the Lease expired a lease duration after the last renewal or heartbeat and
  hands the partitions over: they are consumed elsewhere within maxPollIntervalSeconds + lease
  duration + about 1 s (the watchdog judges every 0.5 s; the last renewal was under a second
  before; rule (b) counts from the first sample that showed the lag, up to one sampling period
  later);
- once the Lease has surely expired (last write sent + one API timeout + lease duration) the
  process exits with code 3 (`progress.EXIT_STUCK`) through `os._exit`, even with the main
  thread blocked for good, and Kubernetes restarts the pod. A restarted process takes the
  Lease as any new process does.

Metrics (consumer/metrics.py lists them) are updated at those same steps and served on
`settings.metrics` when a port is set, from before the Lease is taken until `run()` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from groupops.consumer import ownership
from groupops.consumer.brokerprobe import kafka_partitions
from groupops.consumer.errors import (
    KafkaFailure,
    LeaseLostError,
)
from groupops.consumer.failures import call_with_retries
from groupops.consumer.journal import Journal
from groupops.consumer.kube import ReplicaKube
from groupops.consumer.metrics import ConsumerMetrics
from groupops.consumer.offsets import Committer, resolve_starts
from groupops.consumer.planwatch import PlanWatcher
from groupops.consumer.processors import Processor
from groupops.consumer.replica import Replica, kafka_config
from groupops.consumer.rewind import ExpectedPositions
from groupops.consumer.settings import RuntimeSettings
from groupops.kubeapi import KubeError
from groupops.model import MemberId, TopicPartition
from groupops.planner.plan_format import LeaseState, PublishedPlan

__all__ = ["PlanRuntime"]

log = logging.getLogger(__name__)

_POLL_S = 0.1
_KAFKA_READ_TIMEOUT_S = 5.0


class PlanRuntime(Replica):
    """One plan-following consumer process. `run()` blocks until `stop()` (any thread, e.g. a
    signal handler) or a fatal error (raised, after releasing what can be released)."""

    def __init__(
        self,
        settings: RuntimeSettings,
        processor: Processor,
        *,
        journal: Journal | None = None,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        super().__init__(settings, processor, journal=journal, metrics=metrics)
        self._identity = MemberId(settings.identity)
        self._wake = threading.Event()
        self._watcher: PlanWatcher | None = None
        self._kube: ReplicaKube | None = None
        self._owned: set[TopicPartition] = set()
        self._committer: Committer | None = None
        self._positions = ExpectedPositions()
        self._group_started_ms = settings.group_started_ms or int(time.time() * 1000)
        self._active = False
        self._applied: int | None = None
        self._floor_seen = -1
        self._lapses_seen = 0  # the keeper's lapses when this process last (re)started consuming
        self._needs_refresh = True

    def _wake_loop(self) -> None:
        self._wake.set()

    # -- lifecycle ----------------------------------------------------------------------------------

    def run(self) -> None:
        ownership.running(self)
        try:
            super().run()
        finally:
            ownership.running(None)

    def owns_now(self, tp: TopicPartition) -> bool:
        """For the callback (consumer.ownership.owns): owned, the Lease valid right now, and no
        fence or lapse of validity since the loop last applied a plan (a callback that outlasted
        its validity may be running on a grant the loop has not judged yet: its partitions may
        have moved meanwhile)."""
        return tp in self._owned and self._keeper is not None and self._still_valid()

    def applied_epoch(self) -> int | None:
        return self._applied

    def _run(self) -> None:
        settings = self.settings
        clients = [self._connect() for _ in range(3)]  # one per thread: main loop, keeper, watcher
        self._kube = clients[0]
        keeper = self._new_keeper(
            clients[1], seen_epoch=lambda: -1 if self._watcher is None else self._watcher.newest_epoch
        )
        self._watcher = PlanWatcher(clients[2], settings.plan_configmap, on_change=self._wake.set)
        try:
            log.info(
                "identity %s (process %s) acquiring Lease %s",
                settings.identity,
                self.incarnation[:8],
                settings.lease_name,
            )
            if not keeper.acquire(self._stop):
                return
            self._journal.event("acquired", time.time(), floor=keeper.floor)
            keeper.start()
            self._watcher.start()
            self._consumer = Consumer(
                {
                    **kafka_config(settings, on_commit=self._on_commit, error_cb=self._on_error),
                    # `latest` is applied by resolve_starts, to a group's first start only. A
                    # position librdkafka cannot use (out of range: retention deleted it) is an
                    # error here, which `_restart_at_oldest` reports and answers.
                    "auto.offset.reset": "error",
                }
            )
            self._committer = Committer(
                self._consumer,
                self._progress,
                still_valid=self._still_valid,
                metrics=self.metrics,
                journal=self._journal,
                timeout_s=_KAFKA_READ_TIMEOUT_S,
            )
            self._start_watchdog()
            self._loop()
        finally:
            self._shutdown()
            for client in clients:
                client.close()

    def _loop(self) -> None:
        keeper, watchdog = self._keeper, self._watchdog
        assert keeper is not None and self._watcher is not None and watchdog is not None
        while not self._stop.is_set():
            watchdog.beat()
            if self._fatal is not None:
                self._fence(self._fatal)
                raise KafkaFailure(self._fatal)
            if keeper.lost:
                self._fence("another process took the Lease")
                raise LeaseLostError(
                    f"Lease {keeper.name} is held by another process of {self.settings.identity}"
                )
            if watchdog.stuck is not None:
                # The watchdog ends the process once the Lease has expired; until then, nothing.
                if self._active or self._owned:
                    self._fence(f"judged stuck: {watchdog.stuck}")
                self._wake.wait(_POLL_S)
                self._wake.clear()
                continue
            if not self._active:
                self._consumer.poll(0)
                if keeper.valid():
                    self._try_resume()
                if not self._active:
                    self._wake.wait(_POLL_S)
                    self._wake.clear()
                continue
            if not keeper.valid():
                self._fence("the Lease was not renewed within the renew deadline")
                continue
            if keeper.lapses != self._lapses_seen:
                # Valid again, but it had run out (the process was frozen or cut off): the operator
                # may have moved its partitions meanwhile, so nothing is committed or released.
                self._fence("the Lease's validity ran out before it was renewed again")
                continue
            if keeper.floor > self._floor_seen:
                self._fence(f"the operator fenced this identity through epoch {keeper.floor}")
                continue
            latest = self._watcher.latest
            if latest is not None and latest.epoch > (self._applied or -1):
                self._apply(latest)
            self._consume_once()
            if time.monotonic() - self._last_commit >= self.settings.commit_interval_s:
                self._commit_async()

    def _shutdown(self) -> None:
        keeper, watcher = self._keeper, self._watcher
        self._stop_watchdog()
        try:
            if self._consumer is not None:
                if self._active and keeper is not None and keeper.valid() and self._committer is not None:
                    self._committer.commit_final(self._owned)
                self._unassign(self._owned)
                self._owned = set()
                self._active = False
        except KafkaException as e:
            log.error("releasing partitions on stop failed: %s", e)
        finally:
            self.metrics.stopped()
            if keeper is not None and not keeper.lost:
                newest = -1 if watcher is None else watcher.newest_epoch
                keeper.release(through=max(newest, self._applied or 0), acked_epoch=self._applied)
            if watcher is not None:
                watcher.stop()
            self._close_dead_letters()
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            self._journal.event("stop", time.time(), processed=self.processed)
            self._journal.close()

    # -- plans --------------------------------------------------------------------------------------

    def _try_resume(self) -> None:
        """Valid again (or just started): re-read the plan once, then apply the newest plan above
        the floor as soon as there is one."""
        keeper, watcher, kube = self._keeper, self._watcher, self._kube
        assert keeper is not None and watcher is not None and kube is not None
        if self._needs_refresh:
            try:
                configmap = kube.get_configmap(self.settings.plan_configmap)
            except KubeError as e:
                log.warning("re-reading the plan failed: %s", e)
                return
            if configmap is not None:
                watcher.offer(configmap)
            self._needs_refresh = False
        self._floor_seen = keeper.floor
        self._lapses_seen = keeper.lapses
        latest = watcher.latest
        if latest is None or latest.epoch <= keeper.floor:
            return
        self._journal.event("resume", time.time(), epoch=latest.epoch, floor=keeper.floor)
        self._apply(latest)

    def _apply(self, published: PublishedPlan) -> None:
        started = time.monotonic()
        mine = set(published.plan.assignment.get(self._identity, ()))
        leaving = self._owned - mine
        entering = mine - self._owned
        if leaving:
            self._release(leaving)
        if entering:
            self._assign(entering, published.epoch)
        self._owned = mine
        self._applied = published.epoch
        self._active = True
        assert self._keeper is not None
        self._keeper.report(
            acked_epoch=published.epoch,
            partitions=tuple(mine),
            state=LeaseState.ACTIVE,
            stopped=self._stopped,
            errors=self._error_counts,
        )
        self._keeper.kick()
        self.metrics.plan_applied(published.epoch, owned=len(mine))
        if leaving:
            self.metrics.revoked(time.monotonic() - started)
        self._journal.event("ack", time.time(), epoch=published.epoch, owned=len(mine))
        log.info(
            "applied plan epoch %d: %d owned, %d released, %d assigned",
            published.epoch,
            len(mine),
            len(leaving),
            len(entering),
        )

    def _assign(self, entering: set[TopicPartition], epoch: int) -> None:
        """Start consuming `entering` where the group left it (consumer/offsets.py: a partition
        with no commit starts by the reset rule, and that start is committed at once)."""
        committer = self._committer
        assert committer is not None
        starts = resolve_starts(
            self._consumer,
            entering,
            auto_offset_reset=self.settings.kafka.auto_offset_reset,
            group_started_ms=self._group_started_ms,
            timeout_s=_KAFKA_READ_TIMEOUT_S,
        )
        if starts.unresolved:
            log.warning(
                "%d partitions start from their committed offset or the log start: where they "
                "start could not be read",
                len(starts.unresolved),
            )
        committer.assigned(starts, entering)
        committer.commit_starts(starts.starts)
        for tp in entering:
            self._positions.expect(tp, starts.start_of(tp))
        partitions = starts.assignment(entering)
        self._consumer.incremental_assign(partitions)
        # librdkafka keeps a partition's pause flag across unassign/assign: one this process
        # paused when it released it earlier would otherwise never be fetched again.
        self._consumer.resume(partitions)
        self._journal.event(
            "assign",
            time.time(),
            epoch=epoch,
            parts=_names(entering),
            starts={str(tp): offset for tp, offset in sorted(starts.starts.items())},
        )

    def _release(self, leaving: set[TopicPartition]) -> None:
        committer = self._committer
        assert committer is not None
        partitions = kafka_partitions(leaving)
        self._consumer.pause(partitions)
        budget = self.settings.release_commit_budget_s
        assert budget is not None
        outcome = committer.commit_release(leaving, budget_s=budget)
        self.metrics.release_committed(outcome.committed)
        if not outcome.committed:
            log.error(
                "releasing %d partitions uncommitted after %d attempts (%s); their next owner "
                "processes their last messages again",
                len(outcome.uncommitted),
                outcome.attempts,
                outcome.reason,
            )
            self._journal.event(
                "release-uncommitted", time.time(), parts=_names(outcome.uncommitted), why=outcome.reason
            )
            self._error_counts["uncommittedReleases"] += 1  # reported with this epoch's acknowledgement
        self._consumer.incremental_unassign(partitions)
        self._positions.forget(leaving)
        for tp in leaving:
            self._progress.pop(tp, None)
        committer.forget(leaving)
        self._unstop(leaving)
        self.metrics.released(leaving)
        self._journal.event("release", time.time(), parts=_names(leaving))

    def _fence(self, reason: str) -> None:
        was_consuming = self._active or bool(self._owned)
        if was_consuming:
            log.warning("stopped consuming everything: %s", reason)
        self._unassign(self._owned)
        self._owned = set()
        self._progress.clear()
        self._positions.clear()
        self._unstop(list(self._stopped))
        if self._committer is not None:
            self._committer.forget_all()
        self._active = False
        self._needs_refresh = True
        self.metrics.fenced(was_consuming=was_consuming)
        if self._keeper is not None:
            self._keeper.report(
                acked_epoch=self._applied, partitions=(), state=LeaseState.STARTING, stopped={}
            )
        self._journal.event("fence", time.time(), why=reason)

    def _unassign(self, partitions: set[TopicPartition]) -> None:
        if partitions and self._consumer is not None:
            try:
                self._consumer.incremental_unassign(kafka_partitions(partitions))
            except KafkaException as e:
                log.error("unassigning %d partitions failed: %s", len(partitions), e)

    # -- consuming ----------------------------------------------------------------------------------

    def _still_valid(self) -> bool:
        keeper = self._keeper
        assert keeper is not None
        return keeper.valid() and keeper.floor <= self._floor_seen and keeper.lapses == self._lapses_seen

    def _consume_once(self) -> None:
        assert self._keeper is not None
        timeout = max(0.0, min(_POLL_S, self._keeper.valid_until - time.monotonic()))
        messages = self._consumer.consume(num_messages=self.settings.batch_size, timeout=timeout)
        usable, rewound = self._positions.split([m for m in messages if self._usable(m)])
        for tp, (lowest, expected) in sorted(rewound.items()):
            self._refuse_rewind(tp, lowest, expected)
        if not usable:
            return
        if self._processor.batch is not None:
            self._process(self._processor.batch, usable, usable)
            return
        for message in usable:
            if (message.topic(), message.partition()) in self._stopped:
                continue
            if not self._process(self._processor.one, message, [message]):
                return

    def _process(self, function: Any, argument: Any, messages: Sequence[Any]) -> bool:
        """Run the callback on one message or a batch (with the retries of `spec.consumers.onError`)
        and accept the result if the Lease was valid throughout. False when the replica fenced."""
        if not self._still_valid():
            self._fence("the Lease expired before processing")
            return False
        start = time.time()
        failure = call_with_retries(
            function, argument, self.settings.on_error, still_valid=self._still_valid, on_retry=self._retrying
        )
        end = time.time()
        if not self._still_valid():
            self._fence("the Lease expired while processing: result not accepted")
            return False
        if failure is None or self._failed(messages, failure):
            for message in messages:
                self._accept(message, start, end)
        return True

    def _report_stopped(self) -> None:
        """Tell the operator (Lease note, written at once) which partitions are stopped."""
        assert self._keeper is not None
        self._keeper.report(
            acked_epoch=self._applied,
            partitions=tuple(self._owned),
            state=LeaseState.ACTIVE,
            stopped=self._stopped,
            errors=self._error_counts,
        )
        self._keeper.kick()

    def _accept(self, message: Any, start: float, end: float) -> None:
        tp = TopicPartition(message.topic(), message.partition())
        if tp not in self._owned:
            return
        self._progress[tp] = message.offset() + 1
        self._positions.processed(tp, message.offset())
        self.processed += 1
        self.metrics.processed(tp)
        self._journal.processed(tp.topic, tp.partition, message.offset(), start, end)

    def _usable(self, message: Any) -> bool:
        error = message.error()
        if error is None:
            return True
        if error.fatal():
            raise KafkaFailure(f"fatal Kafka error: {error}")
        if error.code() == KafkaError._AUTO_OFFSET_RESET:
            self._restart_at_oldest(TopicPartition(message.topic() or "", message.partition() or 0), error)
        elif error.code() != KafkaError._PARTITION_EOF:
            log.warning("Kafka: %s", error)
        return False

    def _refuse_rewind(self, tp: TopicPartition, lowest: int, expected: int) -> None:
        """The client delivered `tp` from below where it must go on (consumer/rewind.py): drop
        those messages and fetch from `expected` again."""
        if tp not in self._owned:
            return
        log.warning(
            "%s: the client went back to offset %d, below %d where this replica goes on; "
            "fetching from %d again (nothing is processed twice)",
            tp,
            lowest,
            expected,
            expected,
        )
        self.metrics.rewind_refused()
        self._journal.event("rewind-refused", time.time(), part=str(tp), got=lowest, expected=expected)
        self._reposition(tp, expected)

    def _reposition(self, tp: TopicPartition, offset: int) -> None:
        """Fetch an owned partition from `offset` (a logical one too) from now on; anything already
        fetched from it is dropped with the unassignment."""
        self._consumer.incremental_unassign([KafkaPartition(tp.topic, tp.partition)])
        moved = [KafkaPartition(tp.topic, tp.partition, offset)]
        self._consumer.incremental_assign(moved)
        self._consumer.resume(moved)

    def _restart_at_oldest(self, tp: TopicPartition, error: Any) -> None:
        """The partition's position is not in the log any more (retention deleted it, the topic
        was recreated), or it never had one: go on from its oldest message, as Kafka's consumer
        does under `earliest`, and say so. Never `latest`: that would skip what is still there."""
        if tp not in self._owned:
            return
        self.metrics.offset_reset()
        self._journal.event("offset-reset", time.time(), part=str(tp), why=error.str())
        log.warning("%s: no usable position (%s); consuming from its oldest message", tp, error.str())
        self._positions.expect(tp, None)
        self._reposition(tp, OFFSET_BEGINNING)

    # -- commits ------------------------------------------------------------------------------------

    def _commit_async(self) -> None:
        self._last_commit = time.monotonic()
        if self._committer is not None:
            for tp, offset in sorted(self._committer.foreign_commits(self._owned).items()):
                self._adopt_foreign(tp, offset)
            self._committer.commit_async()
        self._record_lag()

    def _adopt_foreign(self, tp: TopicPartition, offset: int) -> None:
        """The group's offset of an owned partition was set by someone else (a reset with Kafka's
        tool, a previous owner's late commit): consume from there, never overwrite it. A partition
        stopped on a failing message goes on too: moving its offset is how a person skips it."""
        assert self._committer is not None
        mine = self._progress.get(tp)
        log.warning(
            "%s: the group's offset was set to %d from outside (this replica was at %s); consuming "
            "from there",
            tp,
            offset,
            "its start" if mine is None else mine,
        )
        self.metrics.foreign_commit()
        self._journal.event("foreign-commit", time.time(), part=str(tp), group=offset, mine=mine)
        self._positions.expect(tp, offset)
        self._reposition(tp, offset)
        self._progress[tp] = offset
        self._committer.adopt(tp, offset)
        if self._unstop([tp]):
            log.warning("%s: no longer stopped (its offset was moved from outside)", tp)
            self._report_stopped()

    def _record_lag(self) -> None:
        """Lag of every owned partition from what the client already holds: the high watermark
        cached from the last fetch response and the next offset to process (processed progress,
        else the client's position). A partition with neither known yet is left out."""
        if not self._owned:
            return
        positions = dict(self._progress)
        lag: dict[TopicPartition, int] = {}
        try:
            unprocessed = [tp for tp in self._owned if tp not in self._progress]
            if unprocessed:
                for partition in self._consumer.position(kafka_partitions(unprocessed)):
                    positions[TopicPartition(partition.topic, partition.partition)] = partition.offset
            for tp in self._owned:
                watermarks = self._consumer.get_watermark_offsets(
                    KafkaPartition(tp.topic, tp.partition), cached=True
                )
                position = positions.get(tp, -1)
                if watermarks is not None and watermarks[1] >= 0 and position >= 0:
                    lag[tp] = max(0, watermarks[1] - position)
        except KafkaException as e:
            log.debug("lag not known: %s", e)
        self.metrics.record_lag(lag)

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        if self._committer is not None:
            self._committer.on_commit(error, partitions)


def _names(partitions: Iterable[TopicPartition]) -> list[str]:
    return [str(tp) for tp in sorted(partitions)]
