"""What both deliveries' replicas share (docs/design.md §9): identity and incarnation, the Lease
keeper (heartbeats or renewals, §7.5), the journal, the metrics, the progress watchdog and its
own broker client, the librdkafka settings, and what happens when the watchdog judges the
replica stuck.

Who calls it: `runtime.PlanRuntime` (`delivery: plan`) and `native.NativeRuntime` (`delivery:
native`) extend `Replica`; each implements `_run` (and the plan runtime wakes its loop through
`_wake_loop`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from groupops.consumer.brokerprobe import BrokerProbe, kafka_partitions
from groupops.consumer.failures import DeadLetterWriter, ErrorAction, Failure
from groupops.consumer.journal import Journal, open_journal
from groupops.consumer.kube import ReplicaKube
from groupops.consumer.lease import LeaseKeeper
from groupops.consumer.metrics import ConsumerMetrics
from groupops.consumer.processors import Processor
from groupops.consumer.progress import EXIT_STUCK, ProgressReport, ProgressWatchdog, Rule, Sample, Stuck
from groupops.consumer.settings import RuntimeSettings
from groupops.model import TopicPartition
from groupops.planner.exits import incarnation_for
from groupops.planner.plan_format import LeaseState

__all__ = ["Replica", "kafka_config", "surrender_when_stuck"]

log = logging.getLogger(__name__)


def kafka_config(settings: RuntimeSettings, **callbacks: Any) -> dict[str, Any]:
    """librdkafka configuration shared by both deliveries: the runtime commits itself (offsets
    are stored only after processing), the identity is the client id and group.instance.id."""
    return {
        **settings.kafka.properties,
        "bootstrap.servers": settings.kafka.bootstrap_servers,
        "group.id": settings.kafka.group_id,
        "group.instance.id": settings.identity,
        "client.id": settings.identity,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": settings.kafka.auto_offset_reset,
        **callbacks,
    }


def surrender_when_stuck(
    stuck: Stuck,
    *,
    keeper: LeaseKeeper,
    settings: RuntimeSettings,
    metrics: ConsumerMetrics,
    journal: Journal,
) -> float:
    """What both runtimes do when the watchdog judges them stuck, in the watchdog's thread: stop
    renewing the Lease, which makes it invalid at once (nothing is accepted or committed from
    then on), count, journal a fence (the audit explains the re-processing it causes), say so.
    Returns when to exit: once the Lease has surely expired."""
    exit_at = keeper.surrender()
    metrics.stuck()
    journal.event("fence", time.time(), why=f"stuck ({stuck.rule}): {stuck}")
    log.error(
        "stuck: %s (maxPollIntervalSeconds %d). Stopped renewing Lease %s: nothing is accepted or "
        "committed any more, the partitions move once it expires; exiting with code %d in %.1f s",
        stuck,
        settings.max_poll_interval_s,
        keeper.name,
        EXIT_STUCK,
        max(0.0, exit_at - time.monotonic()),
    )
    return exit_at


class Replica:
    """One consumer process of one identity. `run()` blocks until `stop()` (any thread, e.g. a
    signal handler) or a fatal error."""

    def __init__(
        self,
        settings: RuntimeSettings,
        processor: Processor,
        *,
        journal: Journal | None = None,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or ConsumerMetrics()
        self._processor = processor
        self.incarnation = incarnation_for(settings.pod_uid)
        self._journal = journal or open_journal(settings.record_dir, settings.identity, self.incarnation)
        self._stop = threading.Event()
        self._consumer: Any = None
        self._keeper: LeaseKeeper | None = None
        self._watchdog: ProgressWatchdog | None = None
        self._probe: BrokerProbe | None = None
        self._owned: Set[TopicPartition] = frozenset()
        """Only ever rebound, never mutated: the watchdog's thread reads it."""
        self._progress: dict[TopicPartition, int] = {}
        self._stopped: Mapping[TopicPartition, int] = {}
        """Partitions stopped on a failing message (consumer/failures.py) -> its offset; only ever
        rebound, never mutated: the watchdog's thread reads it."""
        self._fatal: str | None = None
        on_error = settings.on_error
        self._dead_letters = (
            DeadLetterWriter(
                on_error.dead_letter_topic,
                {**settings.kafka.properties, "bootstrap.servers": settings.kafka.bootstrap_servers},
                settings.identity,
            )
            if on_error.action is ErrorAction.DEAD_LETTER and on_error.dead_letter_topic
            else None
        )
        self._error_counts: dict[str, int] = {"skipped": 0, "deadLettered": 0, "uncommittedReleases": 0}
        """Reported on the Lease (`groupops.dev/errors`) for the policy's status and Events."""
        self._last_commit = 0.0
        self.processed = 0

    def stop(self) -> None:
        self._stop.set()
        self._wake_loop()

    def run(self) -> None:
        self.metrics.serve_as_configured(self.settings.metrics)
        try:
            self._run()
        finally:
            self.metrics.close()

    def _run(self) -> None:
        raise NotImplementedError

    def _wake_loop(self) -> None:
        """Make the main loop look at its state now (a stop, a fatal error, a stuck verdict)."""

    # -- the pieces -----------------------------------------------------------------------------

    def _connect(self) -> ReplicaKube:
        settings = self.settings
        return ReplicaKube.connect(
            settings.namespace, kubeconfig=settings.kubeconfig, timeout_s=settings.lease.request_timeout_s
        )

    def _new_keeper(self, kube: ReplicaKube, *, seen_epoch: Callable[[], int] | None = None) -> LeaseKeeper:
        settings = self.settings
        self._keeper = LeaseKeeper(
            kube,
            settings.lease,
            name=settings.lease_name,
            policy=settings.policy,
            identity=settings.identity,
            incarnation=self.incarnation,
            seen_epoch=seen_epoch,
            progress=self._progress_report,
            on_stuck=self._judged_stuck_by_operator,
        )
        self.metrics.follow_liveness(self._keeper)
        return self._keeper

    def _start_watchdog(self) -> None:
        self._probe = BrokerProbe(self.settings)
        self._watchdog = ProgressWatchdog(
            self.settings.max_poll_interval_s, sample=self._sample_progress, on_stuck=self._on_stuck
        )
        self._watchdog.start()

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.stop() and self._probe is not None:
            self._probe.close()  # only once the watchdog's thread no longer samples through it

    # -- a callback that keeps failing (consumer/failures.py, design §9.2) -------------------------

    def _retrying(self, attempt: int, error: BaseException) -> None:
        self.metrics.processing_error("retried")
        log.warning(
            "the processing callback raised %s: %s (attempt %d of %d; retrying)",
            type(error).__name__,
            error,
            attempt,
            self.settings.on_error.retries + 1,
        )

    def _failed(self, messages: Sequence[Any], failure: Failure) -> bool:
        """Every retry failed: the action of `spec.consumers.onError` (consumer/failures.py).
        True when the messages count as processed (skipped, dead-lettered); False when their
        partitions were stopped."""
        action = self.settings.on_error.action
        first = messages[0]
        where = f"{first.topic()}-{first.partition()}@{first.offset()}"
        if action is ErrorAction.DEAD_LETTER:
            assert self._dead_letters is not None
            problem = self._dead_letters.write(messages, failure)
            if problem is None:
                self.metrics.processing_error("dead_lettered", len(messages))
                log.error(
                    "%s (%d messages) sent to dead-letter topic %s after %d attempts: %s",
                    where,
                    len(messages),
                    self._dead_letters.topic,
                    failure.attempts,
                    failure.describe(),
                )
                self._journal_failure("dead-lettered", messages, failure)
                self._count_error("deadLettered", len(messages))
                return True
            log.error("%s could not be dead-lettered (%s): stopping its partition", where, problem)
        elif action is ErrorAction.SKIP:
            self.metrics.processing_error("skipped", len(messages))
            log.error(
                "%s (%d messages) skipped after %d attempts: %s",
                where,
                len(messages),
                failure.attempts,
                failure.describe(),
            )
            self._journal_failure("skipped", messages, failure)
            self._count_error("skipped", len(messages))
            return True
        self._stop_partitions(messages, failure)
        return False

    def _stop_partitions(self, messages: Sequence[Any], failure: Failure) -> None:
        """Pause the partitions of `messages` at their first failing message: nothing after it is
        processed or committed by this process; the other partitions go on."""
        stopped = dict(self._stopped)
        for message in messages:
            tp = TopicPartition(message.topic(), message.partition())
            if tp in self._owned and tp not in stopped:
                stopped[tp] = message.offset()
        fresh = {tp: offset for tp, offset in stopped.items() if tp not in self._stopped}
        if not fresh:
            return
        self._consumer.pause(kafka_partitions(fresh))
        self._stopped = stopped
        self.metrics.processing_error("stopped", len(fresh))
        self.metrics.partitions_stopped.set(len(stopped))
        self._report_stopped()
        for tp, offset in sorted(fresh.items()):
            log.error(
                "%s stopped at offset %d after %d attempts: %s. It stays stopped (and reported) until "
                "it moves to another replica or this one restarts",
                tp,
                offset,
                failure.attempts,
                failure.describe(),
            )
            self._journal.event("stopped", time.time(), part=str(tp), offset=offset, why=failure.describe())

    def _unstop(self, partitions: Iterable[TopicPartition]) -> bool:
        """Forget stopped partitions that left this replica; True when there were any (the plan
        runtime's next acknowledgement or fence report carries the new set)."""
        leaving = set(partitions)
        if not leaving & self._stopped.keys():
            return False
        self._stopped = {tp: o for tp, o in self._stopped.items() if tp not in leaving}
        self.metrics.partitions_stopped.set(len(self._stopped))
        return True

    def _journal_failure(self, kind: str, messages: Sequence[Any], failure: Failure) -> None:
        self._journal.event(
            kind,
            time.time(),
            messages=[f"{m.topic()}-{m.partition()}@{m.offset()}" for m in messages],
            why=failure.describe(),
        )

    def _count_error(self, kind: str, count: int = 1) -> None:
        self._error_counts[kind] += count
        self._report_stopped()

    def _report_stopped(self) -> None:
        """Tell the operator which partitions are stopped and what was counted (Lease notes,
        written at once). The plan runtime adds its acknowledged epoch and owned set."""
        assert self._keeper is not None
        self._keeper.report(
            acked_epoch=None,
            partitions=(),
            state=LeaseState.ACTIVE,
            stopped=self._stopped,
            errors=self._error_counts,
        )
        self._keeper.kick()

    def _close_dead_letters(self) -> None:
        if self._dead_letters is not None:
            self._dead_letters.close()

    # -- Kafka's callbacks ----------------------------------------------------------------------

    def _on_error(self, error: Any) -> None:
        if error.fatal():
            self._fatal = f"fatal Kafka error: {error}"
            self._wake_loop()
        else:
            log.debug("Kafka: %s", error)

    def _count_commit(self, error: Any, partitions: list[Any]) -> None:
        if error is not None or any(partition.error is not None for partition in partitions):
            self.metrics.commit_failed()
        else:
            self.metrics.commit_succeeded()

    def _journal_commits(self, partitions: list[Any]) -> None:
        now = time.time()
        for partition in partitions:
            if partition.error is None and partition.offset >= 0:
                self._journal.committed(partition.topic, partition.partition, partition.offset, now)

    # -- the progress watchdog (its own thread) -------------------------------------------------

    def _sample_progress(self, timeout_s: float) -> Sample:
        assert self._probe is not None
        # `_owned` is only ever rebound and `dict.copy()` is atomic: consistent reads.
        # A partition stopped on a failing message is reported, not stuck.
        return self._probe.sample(
            frozenset(self._owned - self._stopped.keys()), self._progress.copy(), timeout_s
        )

    def _progress_report(self) -> ProgressReport:
        """For the Lease keeper's heartbeats (its thread): the watchdog's report, read under its
        lock; nothing before the watchdog runs."""
        watchdog = self._watchdog
        if watchdog is None:
            return {}
        return watchdog.report(committed_at=self.metrics.last_commit_at)

    def _judged_stuck_by_operator(self, reason: str) -> None:
        """The operator refused a heartbeat as stuck (the keeper has surrendered already): the
        watchdog declares it as its own verdict, so the replica fences itself, counts, journals
        and exits with EXIT_STUCK once the Lease has surely expired."""
        watchdog = self._watchdog
        if watchdog is not None:
            watchdog.judged_stuck(Stuck(Rule.OPERATOR, self.settings.max_poll_interval_s))
        log.error("the operator judged this replica stuck: %s", reason)

    def _on_stuck(self, stuck: Stuck) -> float:
        assert self._keeper is not None
        exit_at = surrender_when_stuck(
            stuck, keeper=self._keeper, settings=self.settings, metrics=self.metrics, journal=self._journal
        )
        self._wake_loop()
        return exit_at
