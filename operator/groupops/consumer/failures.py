"""What a replica does when the user's callback raises (docs/design.md §9.2): retry with a
doubling backoff, then `stop` the partition, `skip` the message, or send it to a `deadLetter`
topic. Never a crash: a process that exits on a poison message hands it to the next replica,
which crashes on it too.

Who calls it: `runtime.PlanRuntime`, from its main loop, around every callback.

- Retries run in the main loop; their waits are bounded (`ErrorSettings.total_backoff_s`, at most
  half the max poll interval, checked with the settings) so the progress watchdog never judges a
  retrying replica stuck. A retry waits no longer than the Lease stays valid.
- `stop`: the partition is paused at the failing message, nothing after it is processed, its
  offset stays below the message, and the replica reports it (metrics, journal, Lease report) and
  goes on with its other partitions. The progress watchdog ignores a stopped partition. It is
  tried again when it moves to another replica or the replica restarts (a fixed release).
- `skip`: the message counts as processed; its offset is committed.
- `deadLetter`: the record is produced, with its key, value and headers, to the dead-letter topic
  with `groupops.error.*` headers (the original topic, partition, offset and timestamp, the error,
  the identity); only once the broker acknowledged it (acks=all) does the message count as
  processed. A dead-letter write that fails stops the partition instead.
For a batch callback the unit is the batch: each of its messages gets the same outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer

from groupops.consumer.errors import ConsumerConfigError
from groupops.planner.onerror import BACKOFF_MAX_S, MAX_RETRIES, ErrorAction, backoff_s, total_backoff_s

__all__ = ["DeadLetterWriter", "ErrorAction", "ErrorSettings", "Failure", "call_with_retries"]

log = logging.getLogger(__name__)

_DEAD_LETTER_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSettings:
    """`spec.consumers.onError`: retries after the first failure, the first backoff (doubled each
    retry, at most 30 s), then the action."""

    retries: int = 3
    backoff_s: float = 1.0
    action: ErrorAction = ErrorAction.STOP
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ConsumerConfigError(
                "GROUPOPS_ON_ERROR_RETRIES", f"expected 0 to {MAX_RETRIES}, got {self.retries}"
            )
        if not 0 <= self.backoff_s <= BACKOFF_MAX_S:
            raise ConsumerConfigError(
                "GROUPOPS_ON_ERROR_BACKOFF_SECONDS", f"expected 0 to {BACKOFF_MAX_S:g}, got {self.backoff_s}"
            )
        if self.action is ErrorAction.DEAD_LETTER and not self.dead_letter_topic:
            raise ConsumerConfigError(
                "GROUPOPS_DEAD_LETTER_TOPIC", "onError deadLetter needs the topic to write failed records to"
            )

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (1-based)."""
        return backoff_s(self.backoff_s, retry)

    @property
    def total_backoff_s(self) -> float:
        return total_backoff_s(self.backoff_s, self.retries)


@dataclass(frozen=True, slots=True)
class Failure:
    """The callback still raised after every retry (or the Lease ran out between retries)."""

    error: BaseException
    attempts: int
    lease_ran_out: bool = False

    def describe(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


def call_with_retries(
    function: Callable[[Any], None],
    argument: Any,
    settings: ErrorSettings,
    *,
    still_valid: Callable[[], bool],
    on_retry: Callable[[int, BaseException], None] = lambda attempt, error: None,
    sleep: Callable[[float], None] = time.sleep,
) -> Failure | None:
    """Call `function(argument)`; when it raises, retry up to `settings.retries` times with the
    backoff. None when a call returned; the last failure otherwise. Stops retrying as soon as the
    Lease is no longer valid (the result could not be accepted anyway)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            function(argument)
        except Exception as e:
            if attempt > settings.retries:
                return Failure(e, attempt)
            on_retry(attempt, e)
            sleep(settings.backoff(attempt))
            if not still_valid():
                return Failure(e, attempt, lease_ran_out=True)
            continue
        return None


class DeadLetterWriter:
    """Produces failed records to the dead-letter topic through its own idempotent producer
    (created on first use), waiting for the broker's acknowledgement of each batch."""

    def __init__(self, topic: str, kafka_config: dict[str, Any], identity: str) -> None:
        self.topic = topic
        self._config = {
            **kafka_config,
            "acks": "all",
            "enable.idempotence": True,
            "client.id": f"{identity}-dead-letter",
        }
        self._identity = identity
        self._producer: Any = None

    def write(self, messages: Sequence[Any], failure: Failure) -> str | None:
        """None when every record was acknowledged; the reason otherwise."""
        if self._producer is None:
            self._producer = Producer(self._config)
        errors: list[str] = []

        def delivered(error: Any, _: Any) -> None:
            if error is not None:
                errors.append(str(error))

        try:
            for message in messages:
                self._producer.produce(
                    self.topic,
                    value=message.value(),
                    key=message.key(),
                    headers=[*(message.headers() or []), *self._error_headers(message, failure)],
                    on_delivery=delivered,
                )
        except (KafkaException, BufferError) as e:
            return f"producing to {self.topic} failed: {e}"
        left = self._producer.flush(_DEAD_LETTER_TIMEOUT_S)
        if left:
            return f"{left} records not acknowledged by {self.topic} within {_DEAD_LETTER_TIMEOUT_S:g} s"
        if errors:
            return f"{self.topic} refused records: {errors[0]}"
        return None

    def _error_headers(self, message: Any, failure: Failure) -> list[tuple[str, bytes]]:
        _, timestamp = message.timestamp()
        return [
            ("groupops.error.topic", str(message.topic()).encode()),
            ("groupops.error.partition", str(message.partition()).encode()),
            ("groupops.error.offset", str(message.offset()).encode()),
            ("groupops.error.timestamp", str(timestamp).encode()),
            ("groupops.error.class", type(failure.error).__name__.encode()),
            ("groupops.error.message", str(failure.error)[:4096].encode()),
            ("groupops.error.attempts", str(failure.attempts).encode()),
            ("groupops.error.identity", self._identity.encode()),
        ]

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(_DEAD_LETTER_TIMEOUT_S)
            self._producer = None
