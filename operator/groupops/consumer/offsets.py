"""Where a newly owned partition starts, and committing so that nothing is skipped and no offset
moves backwards (docs/design.md §9.1). Plan delivery only.

Who calls it: `runtime.PlanRuntime`, from its main loop, which alone uses its confluent-kafka
consumer (the commit callback runs in that thread too, inside `consume`/`poll`).

Start positions (`resolve_starts`): a partition the group has committed starts there. One with no
commit starts, under `earliest`, at the log start; under `latest`, at the first message written
at or after the group's start (`group_started_ms`: the policy's creation) -- the end of the log
on the group's very first start, but every message of a partition added later, and every message
a crashed first owner did not get to commit. The resolved offset is committed at once, before
anything is processed, so every later owner finds it.

Commits (`Committer`):
- A partition assigned less than `LATE_COMMIT_WINDOW_S` ago may still receive a commit its
  previous owner sent before it lost its Lease (an asynchronous commit in flight when it was
  fenced). Before committing such a partition the committer reads the group's committed offset
  and never writes below it: the partition is left uncommitted until its own progress passes the
  offset the group holds. Offsets therefore never move backwards across owners.
- The release commit (partitions leaving in a new epoch) is retried with a doubling backoff
  until it succeeds, the Lease is no longer valid, or `release_budget_s` runs out; the replica
  acknowledges the epoch only after that. Kafka answers requests on one connection in order, so
  a successful release commit also means every earlier asynchronous commit was answered.
- Every `FOREIGN_CHECK_INTERVAL_S` the committer compares the group's committed offsets of the
  owned partitions with the last offsets it sent (`foreign_commits`). One it never sent was set
  from outside (`kafka-consumer-groups --reset-offsets`, which Kafka allows because a group of
  plan-delivery replicas has no members on the broker; or a previous owner's late commit): the
  runtime moves its position there (`adopt`) instead of overwriting it with its next commit.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from groupops.consumer.brokerprobe import kafka_partitions
from groupops.consumer.journal import Journal
from groupops.consumer.metrics import ConsumerMetrics
from groupops.model import TopicPartition

__all__ = [
    "FOREIGN_CHECK_INTERVAL_S",
    "LATE_COMMIT_WINDOW_S",
    "Committer",
    "ReleaseOutcome",
    "StartPositions",
    "resolve_starts",
]

log = logging.getLogger(__name__)

LATE_COMMIT_WINDOW_S = 90.0
"""How long after a partition is assigned a commit from its previous owner may still land:
librdkafka's request timeout (socket.timeout.ms, 60 s) plus a margin for a slow broker."""
FOREIGN_CHECK_INTERVAL_S = 10.0
"""How often a replica compares the group's committed offsets with the ones it sent."""
_SENT_REMEMBERED = 16
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class StartPositions:
    """What `resolve_starts` found for the partitions entering this replica.

    committed: the group's committed offset, per partition that has one. starts: the explicit
    first offset for partitions without a commit under `latest` (to commit at once).
    unresolved: partitions whose start could not be read; they start from the stored offset,
    else the log start (never the end: at worst messages are processed again, none skipped)."""

    committed: dict[TopicPartition, int] = field(default_factory=dict)
    starts: dict[TopicPartition, int] = field(default_factory=dict)
    unresolved: frozenset[TopicPartition] = frozenset()

    def assignment(self, entering: Iterable[TopicPartition]) -> list[Any]:
        """The confluent-kafka partitions to assign: explicit offsets where known (the commit just
        read, or the start to commit), else the stored offset (librdkafka's default). Explicit, so
        librdkafka looks nothing up itself: a lookup of its own can land late (consumer/rewind.py)."""
        return [
            KafkaPartition(tp.topic, tp.partition, start)
            if (start := self.start_of(tp)) is not None
            else KafkaPartition(tp.topic, tp.partition)
            for tp in sorted(entering)
        ]

    def start_of(self, tp: TopicPartition) -> int | None:
        """Where `tp` starts, where known: its start to commit, else its commit."""
        return self.starts.get(tp, self.committed.get(tp))


def resolve_starts(
    client: Any,
    entering: set[TopicPartition],
    *,
    auto_offset_reset: str,
    group_started_ms: int,
    timeout_s: float,
) -> StartPositions:
    """Read the group's commits for `entering`; under `latest`, find where each partition without
    one starts (module docstring). Any failed read leaves the partitions it concerns unresolved."""
    if not entering:
        return StartPositions()
    try:
        answer = client.committed(kafka_partitions(entering), timeout=timeout_s)
    except KafkaException as e:
        log.warning("cannot read the committed offsets of %d partitions: %s", len(entering), e)
        return StartPositions(unresolved=frozenset(entering))
    committed: dict[TopicPartition, int] = {}
    unreadable: set[TopicPartition] = set()
    for partition in answer:
        tp = TopicPartition(partition.topic, partition.partition)
        if partition.error is not None:
            unreadable.add(tp)
        elif partition.offset >= 0:
            committed[tp] = partition.offset
    fresh = entering - committed.keys() - unreadable
    if auto_offset_reset != "latest" or not fresh:
        return StartPositions(committed=committed, unresolved=frozenset(unreadable))
    starts, unfound = _offsets_since(client, fresh, group_started_ms, timeout_s)
    return StartPositions(committed=committed, starts=starts, unresolved=frozenset(unreadable | unfound))


def _offsets_since(
    client: Any, partitions: set[TopicPartition], since_ms: int, timeout_s: float
) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
    """The first offset with a timestamp at or after `since_ms` per partition; the log end where
    no message is that recent. Returns (starts, partitions that could not be read)."""
    request = [KafkaPartition(tp.topic, tp.partition, since_ms) for tp in sorted(partitions)]
    try:
        try:
            answer = client.offsets_for_times(request, timeout=timeout_s)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            # Partitions added since the client last refreshed its metadata (every 5 minutes by
            # default): refresh it for these topics, then ask again.
            for topic in sorted({tp.topic for tp in partitions}):
                client.list_topics(topic, timeout=timeout_s)
            answer = client.offsets_for_times(request, timeout=timeout_s)
    except KafkaException as e:
        log.warning("cannot look up offsets by time for %d partitions: %s", len(partitions), e)
        return {}, set(partitions)
    starts: dict[TopicPartition, int] = {}
    failed: set[TopicPartition] = set()
    for partition in answer:
        tp = TopicPartition(partition.topic, partition.partition)
        if partition.error is not None:
            failed.add(tp)
        elif partition.offset >= 0:
            starts[tp] = partition.offset
        else:
            try:
                _, high = client.get_watermark_offsets(
                    KafkaPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
                )
            except KafkaException as e:
                log.warning("cannot read the end offset of %s: %s", tp, e)
                failed.add(tp)
                continue
            starts[tp] = high
    return starts, failed


def _topic_gone(error: Any) -> bool:
    """The broker's answer for a partition whose topic was deleted: nothing left to commit."""
    return isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@dataclass(frozen=True, slots=True)
class ReleaseOutcome:
    """How the release commit went: `committed` (nothing left to commit), `attempts`, and the
    partitions left uncommitted (the next owner processes their last messages again)."""

    committed: bool
    attempts: int
    uncommitted: tuple[TopicPartition, ...] = ()
    reason: str = ""


class Committer:
    """The offsets this replica has committed, and the rules above for sending more.

    `progress` is the runtime's own dict (next offset to process per owned partition), read here,
    never written. `still_valid` says whether the Lease allows a commit right now."""

    def __init__(
        self,
        consumer: Any,
        progress: Mapping[TopicPartition, int],
        *,
        still_valid: Callable[[], bool],
        metrics: ConsumerMetrics,
        journal: Journal,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._progress = progress
        self._still_valid = still_valid
        self._metrics = metrics
        self._journal = journal
        self._timeout_s = timeout_s
        self._clock = clock
        self.committed: dict[TopicPartition, int] = {}
        self._guarded_until: dict[TopicPartition, float] = {}
        self._group_floor: dict[TopicPartition, int] = {}
        self._sent: dict[TopicPartition, deque[int]] = {}
        """The last offsets this replica sent per partition (a commit in flight is one of them)."""
        self._next_foreign_check = clock() + FOREIGN_CHECK_INTERVAL_S
        self._behind: dict[TopicPartition, int] = {}
        """The group offset each partition was last found behind (said once per late commit)."""

    # -- ownership changes ----------------------------------------------------------------------

    def assigned(self, starts: StartPositions, entering: Iterable[TopicPartition]) -> None:
        """Partitions now owned: guard them for the late-commit window, starting from the
        offsets the group held when they were assigned."""
        until = self._clock() + LATE_COMMIT_WINDOW_S
        for tp in entering:
            self._guarded_until[tp] = until
            sent = self._sent.setdefault(tp, deque(maxlen=_SENT_REMEMBERED))
            if tp in starts.committed:
                self._group_floor[tp] = starts.committed[tp]
                sent.append(starts.committed[tp])

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.committed.pop(tp, None)
            self._guarded_until.pop(tp, None)
            self._group_floor.pop(tp, None)
            self._behind.pop(tp, None)
            self._sent.pop(tp, None)

    def forget_all(self) -> None:
        self.committed.clear()
        self._guarded_until.clear()
        self._group_floor.clear()
        self._behind.clear()
        self._sent.clear()

    # -- commits ----------------------------------------------------------------------------------

    def commit_starts(self, starts: Mapping[TopicPartition, int]) -> None:
        """Pin the start of partitions that had no commit (synchronously, once: if it fails the
        regular commits of the first processed messages pin it instead)."""
        if not starts or not self._still_valid():
            return
        try:
            result = self._send(dict(starts), asynchronous=False)
        except KafkaException as e:
            self._metrics.commit_failed()
            log.warning("committing the start of %d new partitions failed: %s", len(starts), e)
            return
        self._accepted(None, result, starts_only=True)

    def commit_async(self) -> None:
        pending, _ = self._sendable(self.pending(None))  # unknown ones: at the next interval
        if not pending or not self._still_valid():
            return
        try:
            self._send(pending, asynchronous=True)
        except KafkaException as e:
            self._metrics.commit_failed()
            log.warning("commit failed: %s", e)

    def commit_release(self, partitions: Iterable[TopicPartition], *, budget_s: float) -> ReleaseOutcome:
        """Commit what was processed of `partitions` synchronously, retrying with backoff until it
        succeeds, the Lease is no longer valid, or `budget_s` is spent. A guard read that fails
        (the coordinator is away) is a failed attempt too, retried the same way."""
        deadline = self._clock() + budget_s
        backoff = _BACKOFF_FIRST_S
        pending = self.pending(partitions)
        attempts = 0
        reason = ""
        while pending:
            if not self._still_valid():
                reason = "the Lease is no longer valid"
                break
            sendable, unknown = self._sendable(pending)
            pending = {tp: offset for tp, offset in pending.items() if tp in sendable or tp in unknown}
            if not pending:
                break  # the group already holds offsets at or above ours: nothing to commit
            attempts += 1
            if unknown:
                reason = "the group's committed offsets could not be read (coordinator unavailable)"
                log.warning("release commit attempt %d: %s", attempts, reason)
            gone: set[TopicPartition] = set()
            if sendable:
                try:
                    result = self._send(sendable, asynchronous=False)
                except KafkaException as e:
                    self._metrics.commit_failed()
                    if _topic_gone(e.args[0] if e.args else None):
                        log.info(
                            "not committing %d released partitions: their topic no longer exists",
                            len(sendable),
                        )
                        gone = set(sendable)
                    else:
                        reason = str(e)
                        log.warning("release commit attempt %d failed: %s", attempts, e)
                else:
                    self._accepted(None, result)
                    gone = {TopicPartition(p.topic, p.partition) for p in result if _topic_gone(p.error)}
                    if any(p.error is not None and not _topic_gone(p.error) for p in result):
                        reason = "the broker refused some partitions"
            pending = {
                tp: offset
                for tp, offset in pending.items()
                if self.committed.get(tp) != offset and tp not in gone
            }
            if not pending or self._clock() + backoff > deadline:
                break
            time.sleep(backoff)
            backoff = min(_BACKOFF_MAX_S, backoff * 2)
        uncommitted = tuple(sorted(pending))
        if uncommitted and not reason:
            reason = f"the release budget of {budget_s:g} s ran out"
        return ReleaseOutcome(
            committed=not uncommitted, attempts=attempts, uncommitted=uncommitted, reason=reason
        )

    def commit_final(self, partitions: Iterable[TopicPartition]) -> None:
        """On stop: one synchronous commit of what was processed (the Lease must still be valid)."""
        outcome = self.commit_release(partitions, budget_s=0.0)
        if outcome.uncommitted:
            log.error(
                "could not commit %d partitions on stop (%s); their next owner processes some messages again",
                len(outcome.uncommitted),
                outcome.reason,
            )

    def _send(self, offsets: dict[TopicPartition, int], *, asynchronous: bool) -> Any:
        for tp, offset in offsets.items():
            sent = self._sent.setdefault(tp, deque(maxlen=_SENT_REMEMBERED))
            sent.append(offset)
        return self._consumer.commit(offsets=kafka_partitions(offsets, offsets), asynchronous=asynchronous)

    def foreign_commits(self, owned: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Every `FOREIGN_CHECK_INTERVAL_S`: the owned partitions whose committed offset in the
        group is none this replica sent: a reset with Kafka's own tool (or a previous owner's
        late commit). Empty between checks and when the read fails."""
        now = self._clock()
        if now < self._next_foreign_check:
            return {}
        self._next_foreign_check = now + FOREIGN_CHECK_INTERVAL_S
        watched = [tp for tp in owned if tp in self._sent]
        if not watched:
            return {}
        try:
            answer = self._consumer.committed(kafka_partitions(watched), timeout=self._timeout_s)
        except KafkaException as e:
            log.debug("cannot check the group's offsets: %s", e)
            return {}
        foreign: dict[TopicPartition, int] = {}
        for partition in answer:
            tp = TopicPartition(partition.topic, partition.partition)
            ours = self._sent.get(tp, ())
            if partition.error is None and partition.offset >= 0 and partition.offset not in ours:
                foreign[tp] = partition.offset
        return foreign

    def adopt(self, tp: TopicPartition, offset: int) -> None:
        """The group's offset `offset` (set from outside) is now this replica's position."""
        self.committed[tp] = offset
        self._sent.setdefault(tp, deque(maxlen=_SENT_REMEMBERED)).append(offset)
        self._group_floor[tp] = offset
        self._behind.pop(tp, None)

    def pending(self, partitions: Iterable[TopicPartition] | None) -> dict[TopicPartition, int]:
        progress = self._progress
        chosen = (
            dict(progress)
            if partitions is None
            else {tp: progress[tp] for tp in partitions if tp in progress}
        )
        return {tp: offset for tp, offset in chosen.items() if self.committed.get(tp) != offset}

    def on_commit(self, error: Any, partitions: list[Any]) -> None:
        """librdkafka's offset_commit_cb: asynchronous commits only (confluent-kafka returns a
        synchronous commit's result from commit() instead)."""
        if error is not None:
            self._metrics.commit_failed()
            log.warning("asynchronous commit failed: %s", error)
            return
        self._accepted(error, partitions)

    # -- the late-commit guard ------------------------------------------------------------------

    def _sendable(
        self, pending: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """Split `pending` by the guard (recently assigned partitions only): what may be committed
        now, and the partitions whose group offset could not be read (the coordinator is away:
        try again later). Partitions whose commit would put the group's offset below what it
        holds are in neither: there is nothing of theirs to commit."""
        now = self._clock()
        guarded = [tp for tp in pending if self._guarded_until.get(tp, 0.0) > now]
        if not guarded:
            return pending, set()
        unknown = set(guarded)
        try:
            answer = self._consumer.committed(kafka_partitions(guarded), timeout=self._timeout_s)
        except KafkaException as e:
            log.warning(
                "the group's offsets of %d recently assigned partitions are unknown (%s)", len(guarded), e
            )
            answer = []
        for partition in answer:
            tp = TopicPartition(partition.topic, partition.partition)
            if partition.error is None:
                unknown.discard(tp)
                if partition.offset >= 0:
                    self._group_floor[tp] = max(self._group_floor.get(tp, -1), partition.offset)
        sendable: dict[TopicPartition, int] = {}
        for tp, offset in pending.items():
            floor = self._group_floor.get(tp, -1)
            if tp in unknown:
                continue
            if offset >= floor:
                sendable[tp] = offset
            elif self._behind.get(tp) != floor:
                self._behind[tp] = floor
                log.warning(
                    "%s: the group holds offset %d, above this replica's %d (a late commit of its "
                    "previous owner); not committing below it",
                    tp,
                    floor,
                    offset,
                )
                self._journal.event("behind-group", time.time(), part=str(tp), group=floor, mine=offset)
        return sendable, unknown

    def _accepted(self, error: Any, partitions: list[Any], *, starts_only: bool = False) -> None:
        if error is not None or any(partition.error is not None for partition in partitions):
            self._metrics.commit_failed()
        else:
            self._metrics.commit_succeeded()
        now = time.time()
        for partition in partitions:
            if partition.error is not None or partition.offset < 0:
                continue
            tp = TopicPartition(partition.topic, partition.partition)
            if starts_only or tp in self._progress:
                self.committed[tp] = partition.offset
                self._group_floor[tp] = max(self._group_floor.get(tp, -1), partition.offset)
            self._journal.committed(partition.topic, partition.partition, partition.offset, now)
