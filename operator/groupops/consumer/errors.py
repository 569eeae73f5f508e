"""The consumer runtime's exceptions, one tree, mapped from foreign errors at the boundary.

ConsumerError
├── ConsumerConfigError     bad settings (environment, flags); `field` names which one
├── KubeError               the API server said no or could not be reached
│   ├── KubeConflict        a compare-and-swap lost (someone wrote since we read)
│   ├── KubeNotFound
│   ├── KubeForbidden       RBAC refuses the verb (the consumer may only get/update)
│   └── KubeUnavailable     timeout, refused connection, 5xx: transient
├── LeaseLostError          another process took this identity's Lease: this one must stop
└── KafkaFailure            the Kafka client failed in a way the runtime cannot ride out
"""

from __future__ import annotations

__all__ = [
    "ConsumerConfigError",
    "ConsumerError",
    "KafkaFailure",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeNotFound",
    "KubeUnavailable",
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


class KubeError(ConsumerError):
    """A Kubernetes API call failed; `status` is the HTTP status (0 when none came back)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class KubeConflict(KubeError):
    """409: the object changed since the resourceVersion we wrote against."""


class KubeNotFound(KubeError):
    """404."""


class KubeForbidden(KubeError):
    """403: the ServiceAccount may not do this."""


class KubeUnavailable(KubeError):
    """No usable answer: timeout, connection refused or reset, 429 or 5xx. Retry later."""


class LeaseLostError(ConsumerError):
    """Another incarnation of this identity holds the Lease now (a replacement started while this
    process was frozen or cut off). This process has stopped consuming and must exit."""


class KafkaFailure(ConsumerError):
    """A fatal Kafka client error (authentication, a fatal librdkafka error)."""
