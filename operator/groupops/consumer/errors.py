"""The consumer runtime's exceptions, one tree, mapped from foreign errors at the boundary.

ConsumerError
├── ConsumerConfigError     bad settings (environment, flags); `field` names which one
├── LeaseLostError          another process took this identity's Lease: this one must stop
└── KafkaFailure            the Kafka client failed in a way the runtime cannot ride out

Kubernetes API failures are the operator's tree, `groupops.kubeapi.KubeError` (Conflict,
AlreadyExists, NotFound, Forbidden, Transient, ...): one client and one error tree for both.
"""

from __future__ import annotations

__all__ = [
    "ConsumerConfigError",
    "ConsumerError",
    "KafkaFailure",
    "LeaseLostError",
]


class ConsumerError(Exception):
    """Base of every consumer-runtime failure."""


class ConsumerConfigError(ConsumerError):
    """A setting is missing or invalid; `field` is the environment variable or flag."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} ({field})")
        self.field = field
        self.message = message


class LeaseLostError(ConsumerError):
    """Another incarnation of this identity holds the Lease now (a replacement started while this
    process was frozen or cut off). This process has stopped consuming and must exit."""


class KafkaFailure(ConsumerError):
    """A fatal Kafka client error (authentication, a fatal librdkafka error)."""
