"""The user's processing callback, loaded by name: `module:callable`.

A callable taking one `confluent_kafka.Message` processes messages one by one; an object with a
`process_batch(messages)` method processes a batch at a time. Either way the runtime stores a
message's offset only after the callback returned (at-least-once), and only if the Lease was
still valid then. A callback that raises is retried, then its partition is stopped, or the
message skipped or dead-lettered (`spec.consumers.onError`, consumer/failures.py); the process
never exits on it. A callback with side effects
outside Kafka fences them with `groupops.consumer.owns` and `fencing_token` (consumer/ownership.py).

Built-ins: `groupops.consumer.processors:noop` (the default) and `...:sleep_1ms`, a stand-in for
real work in tests and benchmarks.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from groupops.consumer.errors import ConsumerConfigError

__all__ = ["Processor", "load_processor", "noop", "sleep_1ms"]

ProcessOne = Callable[[Any], None]
ProcessBatch = Callable[[Sequence[Any]], None]


@dataclass(frozen=True, slots=True)
class Processor:
    """Exactly one of `one` and `batch` is set."""

    one: ProcessOne | None = None
    batch: ProcessBatch | None = None


def noop(message: Any) -> None:
    """Consume and drop."""


def sleep_1ms(message: Any) -> None:
    """Pretend to work for a millisecond per message."""
    time.sleep(0.001)


def load_processor(spec: str | None, *, field: str = "GROUPOPS_PROCESSOR") -> Processor:
    """Resolve `module:attribute`; ConsumerConfigError naming `field` when it cannot."""
    if not spec:
        return Processor(one=noop)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConsumerConfigError(field, f"expected module:callable, got {spec!r}")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except ImportError as e:
        raise ConsumerConfigError(field, f"cannot import {module_name}: {e}") from e
    except AttributeError:
        raise ConsumerConfigError(field, f"{module_name} has no {attribute}") from None
    batch = getattr(target, "process_batch", None)
    if callable(batch):
        return Processor(batch=batch)
    if callable(target):
        return Processor(one=target)
    raise ConsumerConfigError(field, f"{spec} is neither callable nor has process_batch")
