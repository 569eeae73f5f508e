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
import uuid
from collections.abc import Callable, Mapping, Set
from typing import Any

from groupops.consumer.brokerprobe import BrokerProbe
from groupops.consumer.journal import Journal, open_journal
from groupops.consumer.kube import ReplicaKube
from groupops.consumer.lease import LeaseKeeper
from groupops.consumer.metrics import ConsumerMetrics
from groupops.consumer.processors import Processor
from groupops.consumer.progress import EXIT_STUCK, ProgressWatchdog, Sample, Stuck
from groupops.consumer.settings import RuntimeSettings
from groupops.model import TopicPartition

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
        self.incarnation = uuid.uuid4().hex
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
        )
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

    def _on_stuck(self, stuck: Stuck) -> float:
        assert self._keeper is not None
        exit_at = surrender_when_stuck(
            stuck, keeper=self._keeper, settings=self.settings, metrics=self.metrics, journal=self._journal
        )
        self._wake_loop()
        return exit_at
