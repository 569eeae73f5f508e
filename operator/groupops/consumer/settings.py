"""The consumer runtime's settings: nested frozen dataclasses, built once from the environment the
operator gives every consumer pod (controller/render_pods.py documents it), passed explicitly.

Environment (flags of `groupops consume` override the same names):
    GROUPOPS_POLICY, GROUPOPS_IDENTITY, GROUPOPS_GROUP_ID       required
    GROUPOPS_NAMESPACE          default: the pod's ServiceAccount namespace, else "default"
    GROUPOPS_POD_UID            the pod's UID (downward API): part of the incarnation, so the
                                operator can tell from the pod's status that this process is gone
                                (planner/exits.py)
    GROUPOPS_KAFKA_BOOTSTRAP_SERVERS                            required
    GROUPOPS_KAFKA_PROPERTIES   JSON object of more librdkafka properties
    GROUPOPS_KAFKA_AUTH_DIR     directory with one file per secret property (name = property)
    GROUPOPS_TOPICS             comma-separated; what `native` subscribes to
    GROUPOPS_DELIVERY           plan (default) | native
    GROUPOPS_STRATEGY           the policy's strategy; `native` needs range, roundrobin or
                                cooperative-sticky (Kafka's own assignors)
    GROUPOPS_AUTO_OFFSET_RESET  where a partition with no committed offset starts (earliest);
                                plan delivery applies `latest` to the group's first start only
                                (consumer/offsets.py)
    GROUPOPS_GROUP_STARTED      when the group started (the policy's creation), RFC 3339 or Unix
                                seconds: under `latest`, a partition with no commit starts at the
                                first message written since then (default: this process's start)
    GROUPOPS_RELEASE_COMMIT_SECONDS how long a release commit is retried before the partitions
                                are handed over uncommitted (15; at most half the max poll
                                interval)
    GROUPOPS_ON_ERROR_RETRIES (3), GROUPOPS_ON_ERROR_BACKOFF_SECONDS (1, doubled per retry),
    GROUPOPS_ON_ERROR_ACTION (stop | skip | deadLetter), GROUPOPS_DEAD_LETTER_TOPIC
                                what a callback that keeps raising does (consumer/failures.py)
    GROUPOPS_PLAN_CONFIGMAP, GROUPOPS_LEASE_NAME               default: derived from the policy
    GROUPOPS_LEASE_DURATION_SECONDS (4), GROUPOPS_RENEW_INTERVAL_SECONDS (1, and a quarter of a
                                duration below 4 s: a 2 s Lease renews or beats every 0.5 s),
    GROUPOPS_RENEW_DEADLINE_SECONDS (3/4 of the duration), GROUPOPS_COMMIT_INTERVAL_SECONDS (1),
    GROUPOPS_BATCH_SIZE (100), GROUPOPS_PROCESSOR (module:callable), GROUPOPS_RECORD_DIR
    GROUPOPS_MAX_POLL_INTERVAL_SECONDS  (300, 5..86400) a replica making no progress this long is
                                stuck and exits (consumer/progress.py); native: also librdkafka's
                                max.poll.interval.ms
    GROUPOPS_METRICS_PORT       serve Prometheus metrics on this port (plan delivery); unset or 0:
                                not served
    GROUPOPS_METRICS_HOST       address the metrics server binds (127.0.0.1; 0.0.0.0 in a pod)
    KUBECONFIG                  outside a cluster; inside, the pod's ServiceAccount is used
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from groupops.consumer.errors import ConsumerConfigError
from groupops.consumer.failures import ErrorAction, ErrorSettings
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from groupops.planner.liveness import parse_addresses
from groupops.planner.plan_format import parse_rfc3339_ms
from groupops.planner.wire import lease_name, plan_configmap_name

__all__ = [
    "DEFAULT_MAX_POLL_INTERVAL_S",
    "MAX_POLL_INTERVAL_RANGE",
    "NATIVE_STRATEGIES",
    "Delivery",
    "KafkaClientSettings",
    "LeaseSettings",
    "MetricsSettings",
    "RuntimeSettings",
]

NATIVE_STRATEGIES = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}
"""The policy's strategy name -> librdkafka's `partition.assignment.strategy` value."""

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_RESERVED_KAFKA = frozenset(
    {"group.id", "group.instance.id", "enable.auto.commit", "enable.auto.offset.store", "bootstrap.servers"}
)
DEFAULT_MAX_POLL_INTERVAL_S = 300
"""Kafka's own max.poll.interval.ms default; the CRD's default of spec.consumers.maxPollIntervalSeconds
(the operator always sets the variable, so this one matters outside the operator only)."""
MAX_POLL_INTERVAL_RANGE = (5, 86_400)
_LIBRDKAFKA_SESSION_TIMEOUT_MS = 45_000


class Delivery(StrEnum):
    PLAN = "plan"
    NATIVE = "native"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSettings:
    """Lease timing, in seconds.

    duration_s: how long the operator waits, by its own clock, before judging an unrenewed Lease
    expired; failover takes about this long. renew_interval_s: one renewal per interval (the
    "every second" of docs/design.md §9). renew_deadline_s: the replica stops consuming everything when its
    last successful renewal was *sent* longer ago than this; below the duration so the replica
    has stopped before the operator can judge it expired (leader election's renewDeadline).
    request_timeout_s: one API request's budget, so a hung connection cannot eat the deadline.
    heartbeat_addresses: where the operator answers heartbeats ("host:port"); when given, the
    replica proves it is alive with one heartbeat per interval and writes its Lease only when its
    report changes or no operator answers (docs/design.md §7.5). heartbeat_interval_s: the wait
    after a granted heartbeat (None: renew_interval_s); after an unanswered or refused one the
    replica keeps the renew interval's pace, so a longer steady interval costs no margin when the
    operator is away.
    """

    duration_s: int = DEFAULT_LEASE_DURATION_S
    renew_interval_s: float = 1.0
    renew_deadline_s: float = 3.0
    request_timeout_s: float = 2.0
    heartbeat_addresses: tuple[str, ...] = ()
    heartbeat_interval_s: float | None = None

    def __post_init__(self) -> None:
        if self.duration_s < 1:
            raise ConsumerConfigError("GROUPOPS_LEASE_DURATION_SECONDS", "must be at least 1")
        if not 0 < self.renew_interval_s < self.renew_deadline_s < self.duration_s:
            raise ConsumerConfigError(
                "GROUPOPS_RENEW_DEADLINE_SECONDS",
                f"need 0 < renew interval ({self.renew_interval_s}) < renew deadline "
                f"({self.renew_deadline_s}) < lease duration ({self.duration_s})",
            )
        if not self.renew_interval_s <= self.beat_interval_s < self.renew_deadline_s:
            raise ConsumerConfigError(
                "GROUPOPS_HEARTBEAT_INTERVAL_SECONDS",
                f"need renew interval ({self.renew_interval_s}) <= heartbeat interval "
                f"({self.beat_interval_s}) < renew deadline ({self.renew_deadline_s})",
            )

    @property
    def beat_interval_s(self) -> float:
        """Seconds from a granted heartbeat to the next one."""
        return self.renew_interval_s if self.heartbeat_interval_s is None else self.heartbeat_interval_s


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaClientSettings:
    """How to reach Kafka. `properties` are extra librdkafka properties (security, tuning); the
    runtime owns group.id, group.instance.id and the commit settings and refuses them here."""

    bootstrap_servers: str
    group_id: str
    auto_offset_reset: str = "earliest"
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSettings:
    """Prometheus exposition of this replica (consumer/metrics.py).

    port: None (or 0) serves nothing, the default: a replica opens a port only when its pod asks.
    host: 127.0.0.1 by default so nothing listens beyond the machine unless told to; a pod that
    Prometheus scrapes sets GROUPOPS_METRICS_HOST=0.0.0.0.
    """

    port: int | None = None
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if self.port == 0:
            object.__setattr__(self, "port", None)
        if self.port is not None and not 0 < self.port < 65536:
            raise ConsumerConfigError(
                "GROUPOPS_METRICS_PORT", f"expected a port from 1 to 65535 (0 for none), got {self.port}"
            )
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            raise ConsumerConfigError(
                "GROUPOPS_METRICS_HOST",
                f"expected an IP address to listen on (127.0.0.1, 0.0.0.0, ::), got {self.host!r}",
            ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSettings:
    """Everything one consumer process needs. See the module docstring for the sources."""

    policy: str
    identity: str
    namespace: str
    kafka: KafkaClientSettings
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    delivery: Delivery = Delivery.PLAN
    strategy: str = ""
    topics: tuple[str, ...] = ()
    plan_configmap: str = ""
    lease_name: str = ""
    commit_interval_s: float = 1.0
    batch_size: int = 100
    max_poll_interval_s: int = DEFAULT_MAX_POLL_INTERVAL_S
    """Seconds without progress after which the replica is stuck (consumer/progress.py). A batch
    of `batch_size` messages must be processed within it, as Kafka's max.poll.records within
    max.poll.interval.ms."""
    processor: str | None = None
    record_dir: Path | None = None
    kubeconfig: str | None = None
    group_started_ms: int | None = None
    pod_uid: str = ""
    on_error: ErrorSettings = field(default_factory=ErrorSettings)
    release_commit_budget_s: float | None = None
    """How long a release commit is retried; default 15 s, at most half the max poll interval
    (the loop does not poll meanwhile, and the watchdog must not judge a retrying replica stuck)."""

    def __post_init__(self) -> None:
        if not self.plan_configmap:
            object.__setattr__(self, "plan_configmap", plan_configmap_name(self.policy))
        if not self.lease_name:
            object.__setattr__(self, "lease_name", lease_name(self.policy, self.identity))
        if self.delivery is Delivery.NATIVE:
            if self.strategy not in NATIVE_STRATEGIES:
                raise ConsumerConfigError(
                    "GROUPOPS_STRATEGY",
                    f"delivery native needs one of {', '.join(NATIVE_STRATEGIES)}, got {self.strategy!r}",
                )
            if not self.topics:
                raise ConsumerConfigError(
                    "GROUPOPS_TOPICS", "delivery native needs the topics to subscribe to"
                )
        if self.batch_size < 1:
            raise ConsumerConfigError("GROUPOPS_BATCH_SIZE", "must be at least 1")
        if self.commit_interval_s <= 0:
            raise ConsumerConfigError("GROUPOPS_COMMIT_INTERVAL_SECONDS", "must be positive")
        if self.on_error.total_backoff_s > self.max_poll_interval_s / 2:
            raise ConsumerConfigError(
                "GROUPOPS_ON_ERROR_RETRIES",
                f"{self.on_error.retries} retries wait {self.on_error.total_backoff_s:g} s in all, over half "
                f"the max poll interval ({self.max_poll_interval_s} s): fewer retries or a shorter backoff",
            )
        if self.release_commit_budget_s is None:
            object.__setattr__(self, "release_commit_budget_s", min(15.0, self.max_poll_interval_s / 2))
        elif not 0 <= self.release_commit_budget_s <= self.max_poll_interval_s / 2:
            raise ConsumerConfigError(
                "GROUPOPS_RELEASE_COMMIT_SECONDS",
                f"expected 0 up to half the max poll interval ({self.max_poll_interval_s} s), "
                f"got {self.release_commit_budget_s}",
            )
        self._check_max_poll_interval()

    def _check_max_poll_interval(self) -> None:
        low, high = MAX_POLL_INTERVAL_RANGE
        if not low <= self.max_poll_interval_s <= high:
            raise ConsumerConfigError(
                "GROUPOPS_MAX_POLL_INTERVAL_SECONDS",
                f"expected {low} to {high} seconds, got {self.max_poll_interval_s}",
            )
        interval_ms = self.max_poll_interval_s * 1000
        theirs = self.kafka.properties.get("max.poll.interval.ms")
        if theirs is not None and theirs.strip() != str(interval_ms):
            raise ConsumerConfigError(
                "GROUPOPS_MAX_POLL_INTERVAL_SECONDS",
                f"{self.max_poll_interval_s} s disagrees with max.poll.interval.ms={theirs} in "
                "GROUPOPS_KAFKA_PROPERTIES: set the interval once, here",
            )
        if self.delivery is not Delivery.NATIVE:
            return
        # librdkafka refuses a group consumer whose max.poll.interval.ms is below its
        # session.timeout.ms; say so in our terms instead of failing to create the client.
        session = self.kafka.properties.get("session.timeout.ms", "").strip()
        session_ms = int(session) if session.isdigit() else _LIBRDKAFKA_SESSION_TIMEOUT_MS
        if interval_ms < session_ms:
            raise ConsumerConfigError(
                "GROUPOPS_MAX_POLL_INTERVAL_SECONDS",
                f"delivery native needs at least session.timeout.ms ({session_ms} ms, "
                f"GROUPOPS_KAFKA_PROPERTIES or librdkafka's default), got {self.max_poll_interval_s} s",
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeSettings:
        """Build from the environment (os.environ by default); ConsumerConfigError names the
        variable that is missing or wrong."""
        source = os.environ if env is None else env
        policy = _required(source, "GROUPOPS_POLICY")
        identity = _required(source, "GROUPOPS_IDENTITY")
        duration = _int(source, "GROUPOPS_LEASE_DURATION_SECONDS", DEFAULT_LEASE_DURATION_S)
        # A quarter of a short Lease: a grant or a renewal is valid for 3/4 of the duration, so one
        # lost heartbeat plus its fallback write must fit in it (benchmarks/RESULTS.md, "Liveness").
        renew_interval = _float(source, "GROUPOPS_RENEW_INTERVAL_SECONDS", min(1.0, duration / 4))
        # The operator's --heartbeat-interval, rendered only when set (design §7.5, "the steady
        # heartbeat interval").
        beat_interval = _float(source, "GROUPOPS_HEARTBEAT_INTERVAL_SECONDS", renew_interval)
        lease = LeaseSettings(
            duration_s=duration,
            renew_interval_s=renew_interval,
            heartbeat_interval_s=beat_interval,
            renew_deadline_s=_float(source, "GROUPOPS_RENEW_DEADLINE_SECONDS", duration * 0.75),
            request_timeout_s=_float(
                source, "GROUPOPS_API_TIMEOUT_SECONDS", max(0.5, min(2.0, duration / 4))
            ),
            heartbeat_addresses=_addresses(source, "GROUPOPS_HEARTBEAT_ADDRESSES"),
        )
        kafka = KafkaClientSettings(
            bootstrap_servers=_required(source, "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS"),
            group_id=_required(source, "GROUPOPS_GROUP_ID"),
            auto_offset_reset=source.get("GROUPOPS_AUTO_OFFSET_RESET") or "earliest",
            properties=_kafka_properties(source),
        )
        record_dir = source.get("GROUPOPS_RECORD_DIR")
        try:
            delivery = Delivery(source.get("GROUPOPS_DELIVERY") or "plan")
        except ValueError:
            raise ConsumerConfigError(
                "GROUPOPS_DELIVERY", f"expected plan or native, got {source.get('GROUPOPS_DELIVERY')!r}"
            ) from None
        return cls(
            policy=policy,
            identity=identity,
            namespace=source.get("GROUPOPS_NAMESPACE") or _pod_namespace(),
            pod_uid=source.get("GROUPOPS_POD_UID", "").strip(),
            kafka=kafka,
            lease=lease,
            metrics=MetricsSettings(
                port=_int(source, "GROUPOPS_METRICS_PORT", 0),
                host=source.get("GROUPOPS_METRICS_HOST", "").strip() or "127.0.0.1",
            ),
            delivery=delivery,
            strategy=source.get("GROUPOPS_STRATEGY", ""),
            topics=tuple(t.strip() for t in source.get("GROUPOPS_TOPICS", "").split(",") if t.strip()),
            plan_configmap=source.get("GROUPOPS_PLAN_CONFIGMAP", ""),
            lease_name=source.get("GROUPOPS_LEASE_NAME", ""),
            commit_interval_s=_float(source, "GROUPOPS_COMMIT_INTERVAL_SECONDS", 1.0),
            batch_size=_int(source, "GROUPOPS_BATCH_SIZE", 100),
            max_poll_interval_s=_int(
                source, "GROUPOPS_MAX_POLL_INTERVAL_SECONDS", DEFAULT_MAX_POLL_INTERVAL_S
            ),
            processor=source.get("GROUPOPS_PROCESSOR") or None,
            record_dir=Path(record_dir) if record_dir else None,
            kubeconfig=source.get("KUBECONFIG") or None,
            group_started_ms=_timestamp_ms(source, "GROUPOPS_GROUP_STARTED"),
            on_error=_error_settings(
                source, _int(source, "GROUPOPS_MAX_POLL_INTERVAL_SECONDS", DEFAULT_MAX_POLL_INTERVAL_S)
            ),
            release_commit_budget_s=_optional_float(source, "GROUPOPS_RELEASE_COMMIT_SECONDS"),
        )


def _addresses(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    try:
        return parse_addresses(env.get(name, ""))
    except ValueError as e:
        raise ConsumerConfigError(name, str(e)) from None


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConsumerConfigError(name, "required and not set")
    return value


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConsumerConfigError(name, f"expected an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConsumerConfigError(name, f"expected a number, got {raw!r}") from None


def _error_settings(env: Mapping[str, str], max_poll_interval_s: int) -> ErrorSettings:
    """The first backoff defaults to 1 s, shorter when the retries would otherwise wait more than
    half of a short max poll interval (an explicit value is checked, not changed)."""
    raw_action = env.get("GROUPOPS_ON_ERROR_ACTION", "").strip() or ErrorAction.STOP.value
    try:
        action = ErrorAction(raw_action)
    except ValueError:
        choices = ", ".join(a.value for a in ErrorAction)
        raise ConsumerConfigError(
            "GROUPOPS_ON_ERROR_ACTION", f"choose {choices}; got {raw_action!r}"
        ) from None
    retries = _int(env, "GROUPOPS_ON_ERROR_RETRIES", 3)
    fitting = max_poll_interval_s / 2 / (2**retries - 1) if 0 < retries < 30 else 1.0
    return ErrorSettings(
        retries=retries,
        backoff_s=_float(env, "GROUPOPS_ON_ERROR_BACKOFF_SECONDS", min(1.0, fitting)),
        action=action,
        dead_letter_topic=env.get("GROUPOPS_DEAD_LETTER_TOPIC", "").strip() or None,
    )


def _optional_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "")
    return None if raw == "" else _float(env, name, 0.0)


def _timestamp_ms(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(float(raw) * 1000)
    except ValueError:
        pass
    try:
        return parse_rfc3339_ms(raw)
    except ValueError as e:
        raise ConsumerConfigError(name, f"{e} (or Unix seconds)") from None


def _kafka_properties(env: Mapping[str, str]) -> dict[str, str]:
    properties: dict[str, str] = {}
    raw = env.get("GROUPOPS_KAFKA_PROPERTIES")
    if raw:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConsumerConfigError("GROUPOPS_KAFKA_PROPERTIES", f"not JSON: {e.msg}") from e
        if not isinstance(parsed, dict):
            raise ConsumerConfigError("GROUPOPS_KAFKA_PROPERTIES", "expected a JSON object")
        for key, value in parsed.items():
            if isinstance(value, dict | list) or value is None:
                raise ConsumerConfigError("GROUPOPS_KAFKA_PROPERTIES", f"{key}: expected a scalar value")
            properties[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    auth_dir = env.get("GROUPOPS_KAFKA_AUTH_DIR")
    if auth_dir:
        directory = Path(auth_dir)
        if not directory.is_dir():
            raise ConsumerConfigError("GROUPOPS_KAFKA_AUTH_DIR", f"not a directory: {directory}")
        for path in sorted(directory.iterdir()):
            # Secret volumes hold `..data` links and dot-directories beside the keys.
            if path.name.startswith(".") or not path.is_file():
                continue
            try:
                properties[path.name] = path.read_text(encoding="utf-8").strip()
            except OSError as e:  # e.g. mode 0440 without the pod's fsGroup (docs/image.md)
                raise ConsumerConfigError(
                    "GROUPOPS_KAFKA_AUTH_DIR",
                    f"cannot read {path}: {e.strerror}; a pod running as a non-root user needs "
                    "securityContext.fsGroup to read the mounted Secret",
                ) from e
    reserved = sorted(_RESERVED_KAFKA & set(properties))
    if reserved:
        raise ConsumerConfigError(
            "GROUPOPS_KAFKA_PROPERTIES", f"set by the runtime, not here: {', '.join(reserved)}"
        )
    return properties


def _pod_namespace() -> str:
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"
