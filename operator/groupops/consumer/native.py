"""`delivery: native`: the replica joins the group with Kafka's own protocol as a static member
(`group.instance.id` = its identity) and Kafka's assignor (range, roundrobin or
cooperative-sticky) decides. The operator manages identities, placement and replica count, and
compares the engine's prediction with the broker's actual assignment.

Who calls it: `groupops consume` when GROUPOPS_DELIVERY=native.

The Lease is still taken and renewed (the operator judges liveness from it), but it fences
nothing: Kafka's generations do. The operator publishes its prediction in one epoch (no handoff
waits on a native replica) and compares it with the broker's assignment itself, so the replica
neither watches the plan nor acknowledges epochs. Offsets are stored after the
callback returns and committed every `commit_interval_s`, synchronously for partitions being
revoked, and once more on stop. A static member does not leave the group on close, so its
partitions wait for it until `session.timeout.ms` (the behaviour the failover benchmark
compares against).

Rebalance callbacks, for both protocols: confluent-kafka calls `on_assign`, `on_revoke` or
`on_lost` with the partitions that change and then, since these callbacks call neither, assigns
or unassigns them itself: `incremental_assign`/`incremental_unassign` under cooperative-sticky
(the callbacks get only the increment; partitions that stay are never revoked), `assign`/
`unassign` under range and roundrobin (eager: everything is revoked, then the whole new
assignment assigned). So the owned set is kept as union and difference, right for both;
`on_revoke` commits the revoked partitions synchronously while they are still assigned;
`on_lost` (session expired or fenced by the coordinator) commits nothing, as another member may
own them already. A message of a partition no longer owned is dropped unprocessed (`_loop`).
With `zones`, the pod's `client.rack` (in GROUPOPS_KAFKA_PROPERTIES, render_pods.py) reaches
the leader's rack-aware assignor (KIP-881).

Stuck replicas: librdkafka's `max.poll.interval.ms` is `maxPollIntervalSeconds` (so at least
`session.timeout.ms`, which settings checks), and the progress watchdog of the plan runtime runs
here too with the same rule (runtime.py's docstring; both extend `replica.Replica`): when it
fires, the replica stops its heartbeats and renewals, processes, stores and commits nothing
more, and exits with code 3 once the Lease has surely expired. Kafka moves its partitions: a
static member that stops polling or exits keeps them until librdkafka's poll timer or
`session.timeout.ms` runs out.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from groupops.consumer.errors import ConsumerError, KafkaFailure, LeaseLostError
from groupops.consumer.failures import call_with_retries
from groupops.consumer.replica import Replica, kafka_config
from groupops.consumer.settings import NATIVE_STRATEGIES
from groupops.kubeapi import KubeError
from groupops.model import TopicPartition
from groupops.planner.plan_format import LeaseState

__all__ = ["NativeRuntime"]

log = logging.getLogger(__name__)

_POLL_S = 0.1


class NativeRuntime(Replica):
    """One static member of the group. `run()` blocks until `stop()` or a fatal error.

    `skipped_revoked` counts messages dropped because their partition was revoked (or lost)
    while their batch was being fetched (see `_loop`)."""

    skipped_revoked = 0

    def _run(self) -> None:
        settings = self.settings
        kube = self._connect()
        keeper = self._new_keeper(kube)
        try:
            if not keeper.acquire(self._stop):
                return
            keeper.report(acked_epoch=None, partitions=(), state=LeaseState.ACTIVE)
            keeper.start()
            config = kafka_config(
                settings,
                on_commit=self._on_commit,
                error_cb=self._on_error,
                **{
                    "partition.assignment.strategy": NATIVE_STRATEGIES[settings.strategy],
                    "max.poll.interval.ms": settings.max_poll_interval_s * 1000,
                },
            )
            self._consumer = Consumer(config)
            self._consumer.subscribe(
                list(settings.topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            log.info(
                "identity %s joined group %s as a static member", settings.identity, settings.kafka.group_id
            )
            self._start_watchdog()
            self._loop()
        finally:
            self._shutdown()
            kube.close()

    def _loop(self) -> None:
        watchdog = self._watchdog
        assert self._keeper is not None and watchdog is not None
        while not self._stop.is_set():
            watchdog.beat()
            if self._fatal is not None:
                raise KafkaFailure(self._fatal)
            if self._keeper.lost:
                raise LeaseLostError(f"Lease {self._keeper.name} is held by another process")
            if watchdog.stuck is not None:
                # The watchdog ends the process once the Lease has expired; until then, nothing.
                self._stop.wait(_POLL_S)
                continue
            for message in self._consumer.consume(num_messages=self.settings.batch_size, timeout=_POLL_S):
                if watchdog.stuck is not None:
                    break
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise KafkaFailure(f"fatal Kafka error: {error}")
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("Kafka: %s", error)
                    continue
                tp = TopicPartition(message.topic(), message.partition())
                if tp not in self._owned:
                    # librdkafka serves the rebalance callback inside consume(): a batch can hold
                    # messages fetched before a revoke it then served (it drops them only when
                    # the partition's fetch barrier arrives within the same call). Their new owner
                    # starts from the offset committed on revoke; processing them here would be
                    # a duplicate, and storing their offset could move that commit back.
                    self.skipped_revoked += 1
                    log.debug("skipped %s-%d@%d: revoked", tp.topic, tp.partition, message.offset())
                    continue
                if tp in self._stopped:
                    continue  # stopped on a message its callback keeps failing on (§9.2)
                self._process(message, tp)
            if time.monotonic() - self._last_commit >= self.settings.commit_interval_s:
                self._commit(None, asynchronous=True)

    def _process(self, message: Any, tp: TopicPartition) -> None:
        start = time.time()
        function: Any = self._processor.one
        argument: Any = message
        if self._processor.batch is not None:
            function, argument = self._processor.batch, [message]
        failure = call_with_retries(
            function,
            argument,
            self.settings.on_error,
            still_valid=lambda: not self._is_stuck(),
            on_retry=self._retrying,
        )
        end = time.time()
        if self._is_stuck():
            return  # judged stuck while the callback ran: its offset is not stored
        if failure is not None and not self._failed([message], failure):
            return  # its partition is stopped at this message
        self._progress[tp] = message.offset() + 1
        self.processed += 1
        self.metrics.processed(tp)
        self._journal.processed(tp.topic, tp.partition, message.offset(), start, end)

    def _commit(self, partitions: set[TopicPartition] | None, *, asynchronous: bool) -> None:
        self._last_commit = time.monotonic()
        if self._is_stuck():
            return
        chosen = {tp: o for tp, o in self._progress.items() if partitions is None or tp in partitions}
        if not chosen:
            return
        offsets = [KafkaPartition(tp.topic, tp.partition, o) for tp, o in sorted(chosen.items())]
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except KafkaException as e:
            log.warning("commit failed: %s", e)
            return
        if not asynchronous and result:
            self._on_commit(None, result)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        # librdkafka keeps a pause flag across unassign/assign: a partition this process stopped
        # before it was revoked must be fetched again now that it is assigned afresh.
        consumer.resume(partitions)
        self._owned = self._owned | {TopicPartition(p.topic, p.partition) for p in partitions}
        self.metrics.owning(len(self._owned))
        self._report("assign", partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        revoked = {TopicPartition(p.topic, p.partition) for p in partitions}
        self._commit(revoked, asynchronous=False)
        self._forget(revoked)
        self._report("revoke", partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._forget({TopicPartition(p.topic, p.partition) for p in partitions})
        self._report("lost", partitions)

    def _forget(self, partitions: set[TopicPartition]) -> None:
        if self._unstop(partitions) and self._keeper is not None:
            self._report_stopped()
        self._owned = self._owned - partitions
        self.metrics.released(partitions)
        self.metrics.owning(len(self._owned))
        for tp in partitions:
            self._progress.pop(tp, None)

    def _report(self, kind: str, partitions: list[Any]) -> None:
        names = sorted(f"{p.topic}-{p.partition}" for p in partitions)
        self._journal.event(kind, time.time(), parts=names)
        log.info("%s %d partitions: %s", kind, len(names), ", ".join(names[:12]))

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        self._count_commit(error, partitions)
        if error is not None:
            log.warning("commit failed: %s", error)
            return
        self._journal_commits(partitions)

    def _is_stuck(self) -> bool:
        return self._watchdog is not None and self._watchdog.stuck is not None

    def _shutdown(self) -> None:
        self._stop_watchdog()
        try:
            if self._consumer is not None:
                self._commit(None, asynchronous=False)
                self._consumer.close()
                self._consumer = None
        except (KafkaException, RuntimeError, ConsumerError, KubeError) as e:
            log.error("closing the consumer failed: %s", e)
        finally:
            if self._keeper is not None and not self._keeper.lost:
                self._keeper.release(through=0, acked_epoch=None)
            self.metrics.stopped()
            self._journal.event(
                "stop", time.time(), processed=self.processed, skipped_revoked=self.skipped_revoked
            )
            self._journal.close()
