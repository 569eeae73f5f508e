"""The ConsumerGroupPolicy spec as frozen values: parse, default, validate across fields.

Stage: first step of every reconcile. The CRD's schema (crds/consumergrouppolicy.yaml) rejects
most bad input at the API server; this module repeats those checks (the operator must not trust
that the schema it runs against is the one it ships) and adds what only the operator can judge
against itself, e.g. priorities for identities beyond the replica count. Every failure is a
`SpecError` whose `field` is the path in the resource (`spec.consumers.priorities.orders-7`).

Pure: a mapping in, `PolicySpec` out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from groupops.assign import STRATEGY_NAMES
from groupops.lag.registry import SOURCE_TYPES
from groupops.planner.onerror import MAX_RETRIES, ErrorAction, total_backoff_s
from groupops.planner.wire import identity_ordinal

__all__ = [
    "APPROVALS",
    "DELIVERIES",
    "ERROR_ACTIONS",
    "NATIVE_STRATEGIES",
    "AutoscaleSpec",
    "ConsumersSpec",
    "KafkaSpec",
    "LagSourceSpec",
    "OnErrorSpec",
    "PolicySpec",
    "RebalanceSpec",
    "SpecError",
    "StrategySpec",
    "parse_duration",
    "parse_policy",
]

NATIVE_STRATEGIES = frozenset({"range", "roundrobin", "cooperative-sticky"})
DELIVERIES = ("plan", "native")
APPROVALS = ("auto", "manual")
OFFSET_RESETS = ("earliest", "latest")
MAX_REPLICAS = 1000
ERROR_ACTIONS = tuple(action.value for action in ErrorAction)
MAX_PRIORITY = 1_000_000
DEFAULT_MAX_POLL_INTERVAL_S = 300
"""Kafka's max.poll.interval.ms default (also the CRD's, and the consumer's without the variable)."""
MAX_POLL_INTERVAL_RANGE = (5, 86_400)
_LIBRDKAFKA_SESSION_TIMEOUT_MS = 45_000
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_GROUP = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class SpecError(ValueError):
    """A policy the operator cannot run. `field` is the path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} ({field})")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSpec:
    """How consumers and the lag source reach Kafka. `auth_secret` names a Secret in the policy's
    namespace whose keys are librdkafka properties (sasl.username, ssl.ca.pem, ...)."""

    bootstrap_servers: str
    auth_secret: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategySpec:
    type: str = "lag"
    auto_offset_reset: str = "latest"
    rack_aware: bool = False
    failback: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class LagSourceSpec:
    """`type` and that type's own settings object (`lagSource.<type>`), passed to the registry."""

    type: str = "kafka"
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceSpec:
    """interval_seconds: replan at least this often; imbalance_threshold: replan sooner when the
    published plan's max member lag exceeds its lower bound by this factor; max_moves: cap per
    rebalance (None: none); approval: auto, or manual (a proposal waits for an annotation)."""

    interval_seconds: float = 60.0
    imbalance_threshold: float = 1.2
    max_moves: int | None = None
    approval: str = "auto"


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoscaleSpec:
    minimum: int
    maximum: int
    target_lag_per_replica: int

    def replicas_for(self, total_lag: int) -> int:
        wanted = math.ceil(total_lag / self.target_lag_per_replica) if total_lag > 0 else 0
        return max(self.minimum, min(self.maximum, wanted))


@dataclass(frozen=True, slots=True, kw_only=True)
class OnErrorSpec:
    """`spec.consumers.onError`: what a replica does when its callback keeps raising
    (consumer/failures.py): retries with a doubling backoff, then stop, skip or deadLetter.
    `backoff_seconds` None: 1 s, shortened to fit a short maxPollIntervalSeconds."""

    retries: int = 3
    backoff_seconds: float | None = None
    action: str = "stop"
    dead_letter_topic: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumersSpec:
    """max_poll_interval_seconds: a replica that makes no progress this long is failed over and
    restarted (consumer/progress.py); with native delivery also librdkafka's max.poll.interval.ms."""

    replicas: int = 1
    autoscale: AutoscaleSpec | None = None
    priorities: Mapping[str, int] = field(default_factory=dict)
    delivery: str = "plan"
    zones: tuple[str, ...] = ()
    template: Mapping[str, Any] = field(default_factory=dict)
    max_poll_interval_seconds: int = DEFAULT_MAX_POLL_INTERVAL_S
    on_error: OnErrorSpec = field(default_factory=OnErrorSpec)

    @property
    def max_replicas(self) -> int:
        return self.autoscale.maximum if self.autoscale else self.replicas


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySpec:
    kafka: KafkaSpec
    group_id: str
    topics: tuple[str, ...]
    strategy: StrategySpec = field(default_factory=StrategySpec)
    lag_source: LagSourceSpec = field(default_factory=LagSourceSpec)
    rebalance: RebalanceSpec = field(default_factory=RebalanceSpec)
    consumers: ConsumersSpec = field(default_factory=ConsumersSpec)
    dry_run: bool = False


def parse_duration(text: str, *, where: str) -> float:
    """'60s', '1m30s', '500ms', '2h' -> seconds."""
    if not isinstance(text, str) or not _DURATION.match(text):
        raise SpecError(where, f"expected a duration like 30s, 5m or 1m30s, got {text!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


def parse_policy(spec: Any) -> PolicySpec:
    """Parse `spec` of a ConsumerGroupPolicy; SpecError on the first problem found."""
    root = _obj(spec, "spec", required=True)
    group_id = _str(root, "groupId", "spec.groupId", required=True)
    if not _GROUP.match(group_id):
        raise SpecError("spec.groupId", "use letters, digits, '.', '_' and '-' only (at most 200)")
    topics = _topics(root.get("topics"))
    kafka = _kafka(_obj(root.get("kafka"), "spec.kafka", required=True))
    strategy = _strategy(_obj(root.get("strategy"), "spec.strategy"))
    lag_source = _lag_source(_obj(root.get("lagSource"), "spec.lagSource"), topics)
    rebalance = _rebalance(_obj(root.get("rebalance"), "spec.rebalance"))
    consumers = _consumers(_obj(root.get("consumers"), "spec.consumers"), group_id, strategy)
    if consumers.delivery == "native" and rebalance.approval == "manual":
        raise SpecError(
            "spec.rebalance.approval", "manual approval needs delivery: plan (Kafka assigns in native)"
        )
    _check_max_poll_interval(consumers, kafka)
    dry_run = _bool(root, "dryRun", "spec.dryRun", False)
    return PolicySpec(
        kafka=kafka,
        group_id=group_id,
        topics=topics,
        strategy=strategy,
        lag_source=lag_source,
        rebalance=rebalance,
        consumers=consumers,
        dry_run=dry_run,
    )


def _topics(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise SpecError("spec.topics", "give at least one topic")
    seen: set[str] = set()
    for index, topic in enumerate(raw):
        where = f"spec.topics[{index}]"
        if not isinstance(topic, str) or not _TOPIC.match(topic) or topic in (".", ".."):
            raise SpecError(where, f"not a valid Kafka topic name: {topic!r}")
        if topic in seen:
            raise SpecError(where, f"topic {topic!r} listed twice")
        seen.add(topic)
    return tuple(raw)


def _kafka(raw: Mapping[str, Any]) -> KafkaSpec:
    servers = _str(raw, "bootstrapServers", "spec.kafka.bootstrapServers", required=True)
    secret_ref = _obj(raw.get("authSecretRef"), "spec.kafka.authSecretRef")
    secret = _str(secret_ref, "name", "spec.kafka.authSecretRef.name", required=True) if secret_ref else None
    properties = _obj(raw.get("properties"), "spec.kafka.properties")
    for key, value in properties.items():
        if not isinstance(value, str):
            raise SpecError(f"spec.kafka.properties.{key}", "values are strings (librdkafka properties)")
        if "password" in key or key.endswith((".key", ".pem")) or "secret" in key:
            raise SpecError(
                f"spec.kafka.properties.{key}", "secrets belong in the authSecretRef Secret, not the spec"
            )
    return KafkaSpec(bootstrap_servers=servers, auth_secret=secret, properties=dict(properties))


def _strategy(raw: Mapping[str, Any]) -> StrategySpec:
    kind = _str(raw, "type", "spec.strategy.type", default="lag")
    if kind not in STRATEGY_NAMES:
        raise SpecError(
            "spec.strategy.type", f"unknown strategy {kind!r}: choose one of {', '.join(STRATEGY_NAMES)}"
        )
    reset = _str(raw, "autoOffsetReset", "spec.strategy.autoOffsetReset", default="latest")
    if reset not in OFFSET_RESETS:
        raise SpecError("spec.strategy.autoOffsetReset", f"choose earliest or latest, got {reset!r}")
    return StrategySpec(
        type=kind,
        auto_offset_reset=reset,
        rack_aware=_bool(raw, "rackAware", "spec.strategy.rackAware", False),
        failback=_bool(raw, "failback", "spec.strategy.failback", True),
    )


def _lag_source(raw: Mapping[str, Any], topics: tuple[str, ...]) -> LagSourceSpec:
    kind = _str(raw, "type", "spec.lagSource.type", default="kafka")
    if kind not in SOURCE_TYPES:
        raise SpecError(
            "spec.lagSource.type", f"unknown lag source {kind!r}: choose one of {', '.join(SOURCE_TYPES)}"
        )
    for other in SOURCE_TYPES:
        if other != kind and other in raw:
            raise SpecError(
                f"spec.lagSource.{other}", f"settings for {other!r} but lagSource.type is {kind!r}"
            )
    settings = _obj(raw.get(kind), f"spec.lagSource.{kind}")
    if kind in ("prometheus", "burrow", "static", "forecast") and not settings:
        raise SpecError(f"spec.lagSource.{kind}", f"lagSource.type {kind} needs its settings object")
    if kind == "static":
        lags = _obj(settings.get("lags"), "spec.lagSource.static.lags", required=True)
        for topic, values in lags.items():
            where = f"spec.lagSource.static.lags.{topic}"
            if topic not in topics:
                raise SpecError(where, f"topic {topic!r} is not in spec.topics")
            if not isinstance(values, list) or not values:
                raise SpecError(where, "give one lag per partition")
            for index, value in enumerate(values):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise SpecError(f"{where}[{index}]", f"lag must be a non-negative integer, got {value!r}")
    return LagSourceSpec(type=kind, settings=dict(settings))


def _rebalance(raw: Mapping[str, Any]) -> RebalanceSpec:
    interval = parse_duration(raw.get("interval", "60s"), where="spec.rebalance.interval")
    if interval < 1:
        raise SpecError("spec.rebalance.interval", "must be at least 1s")
    threshold = raw.get("imbalanceThreshold", 1.2)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 1.0 <= threshold <= 100.0:
        raise SpecError(
            "spec.rebalance.imbalanceThreshold", f"expected a number in [1, 100], got {threshold!r}"
        )
    max_moves = raw.get("maxMovesPerRebalance")
    if max_moves is not None:
        max_moves = _int_in(max_moves, "spec.rebalance.maxMovesPerRebalance", 1, 1_000_000)
    approval = _str(raw, "approval", "spec.rebalance.approval", default="auto")
    if approval not in APPROVALS:
        raise SpecError("spec.rebalance.approval", f"choose auto or manual, got {approval!r}")
    return RebalanceSpec(
        interval_seconds=interval,
        imbalance_threshold=float(threshold),
        max_moves=max_moves,
        approval=approval,
    )


def _consumers(raw: Mapping[str, Any], group_id: str, strategy: StrategySpec) -> ConsumersSpec:
    if "replicas" in raw and "autoscale" in raw:
        raise SpecError("spec.consumers.autoscale", "set either replicas or autoscale, not both")
    replicas = _int_in(raw.get("replicas", 1), "spec.consumers.replicas", 0, MAX_REPLICAS)
    autoscale = None
    if "autoscale" in raw:
        scale = _obj(raw["autoscale"], "spec.consumers.autoscale")
        minimum = _int_in(scale.get("min", 1), "spec.consumers.autoscale.min", 0, MAX_REPLICAS)
        maximum = _int_in(scale.get("max"), "spec.consumers.autoscale.max", 1, MAX_REPLICAS)
        if minimum > maximum:
            raise SpecError("spec.consumers.autoscale.min", f"min {minimum} is above max {maximum}")
        target = _int_in(
            scale.get("targetLagPerReplica"), "spec.consumers.autoscale.targetLagPerReplica", 1, 10**15
        )
        autoscale = AutoscaleSpec(minimum=minimum, maximum=maximum, target_lag_per_replica=target)
        replicas = minimum
    delivery = _str(raw, "delivery", "spec.consumers.delivery", default="plan")
    if delivery not in DELIVERIES:
        raise SpecError("spec.consumers.delivery", f"choose plan or native, got {delivery!r}")
    if delivery == "native" and strategy.type not in NATIVE_STRATEGIES:
        raise SpecError(
            "spec.consumers.delivery",
            f"native delivery works with {', '.join(sorted(NATIVE_STRATEGIES))} only, not {strategy.type!r}",
        )
    max_replicas = autoscale.maximum if autoscale else replicas
    priorities: dict[str, int] = {}
    for identity, value in _obj(raw.get("priorities"), "spec.consumers.priorities").items():
        where = f"spec.consumers.priorities.{identity}"
        ordinal = identity_ordinal(group_id, identity)
        if ordinal is None:
            raise SpecError(
                where, f"{identity!r} is not an identity of group {group_id!r} (<groupId>-<ordinal>)"
            )
        if ordinal >= max_replicas:
            raise SpecError(
                where,
                f"unknown identity {identity!r}: the policy runs {group_id}-0..{group_id}-{max_replicas - 1}"
                if max_replicas
                else f"unknown identity {identity!r}: the policy runs no replica",
            )
        priorities[identity] = _int_in(value, where, 0, MAX_PRIORITY)
    zones = raw.get("zones", [])
    if not isinstance(zones, list) or not all(isinstance(z, str) and z for z in zones):
        raise SpecError("spec.consumers.zones", "expected a list of zone names")
    if zones and not strategy.rack_aware:
        raise SpecError(
            "spec.consumers.zones", "zones place replicas for rack-aware plans: set strategy.rackAware"
        )
    template = _obj(raw.get("template"), "spec.consumers.template")
    _check_template(template)
    low, high = MAX_POLL_INTERVAL_RANGE
    max_poll_interval = _int_in(
        raw.get("maxPollIntervalSeconds", DEFAULT_MAX_POLL_INTERVAL_S),
        "spec.consumers.maxPollIntervalSeconds",
        low,
        high,
    )
    return ConsumersSpec(
        replicas=replicas,
        autoscale=autoscale,
        priorities=priorities,
        delivery=delivery,
        zones=tuple(zones),
        template=template,
        max_poll_interval_seconds=max_poll_interval,
        on_error=_on_error(_obj(raw.get("onError"), "spec.consumers.onError"), max_poll_interval),
    )


def _on_error(raw: Mapping[str, Any], max_poll_interval: int) -> OnErrorSpec:
    where = "spec.consumers.onError"
    retries = _int_in(raw.get("retries", 3), f"{where}.retries", 0, MAX_RETRIES)
    backoff: float | None = None
    if "backoffSeconds" in raw:
        value = raw["backoffSeconds"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 30:
            raise SpecError(
                f"{where}.backoffSeconds", f"expected a number of seconds from 0 to 30, got {value!r}"
            )
        backoff = float(value)
        waited = total_backoff_s(backoff, retries)
        if waited > max_poll_interval / 2:
            raise SpecError(
                f"{where}.backoffSeconds",
                f"{retries} retries wait {waited:g} s in all, over half of maxPollIntervalSeconds "
                f"({max_poll_interval}): fewer retries or a shorter backoff",
            )
    action = _str(raw, "action", f"{where}.action", default="stop")
    if action not in ERROR_ACTIONS:
        raise SpecError(f"{where}.action", f"choose {', '.join(ERROR_ACTIONS)}, got {action!r}")
    topic = _str(raw, "deadLetterTopic", f"{where}.deadLetterTopic") or None
    if action == "deadLetter" and topic is None:
        raise SpecError(
            f"{where}.deadLetterTopic", "action deadLetter needs the topic to write failed records to"
        )
    if topic is not None and action != "deadLetter":
        raise SpecError(f"{where}.deadLetterTopic", f"only used with action deadLetter, not {action!r}")
    return OnErrorSpec(retries=retries, backoff_seconds=backoff, action=action, dead_letter_topic=topic)


def _check_max_poll_interval(consumers: ConsumersSpec, kafka: KafkaSpec) -> None:
    """The interval against the librdkafka properties that touch it (the consumer checks the
    same, but a policy refused here is a condition, not a crash-looping pod)."""
    interval_ms = consumers.max_poll_interval_seconds * 1000
    theirs = kafka.properties.get("max.poll.interval.ms")
    if theirs is not None and theirs.strip() != str(interval_ms):
        raise SpecError(
            "spec.kafka.properties.max.poll.interval.ms",
            f"{theirs} disagrees with spec.consumers.maxPollIntervalSeconds "
            f"({consumers.max_poll_interval_seconds}): set maxPollIntervalSeconds only",
        )
    if consumers.delivery != "native":
        return
    session = kafka.properties.get("session.timeout.ms", "").strip()
    session_ms = int(session) if session.isdigit() else _LIBRDKAFKA_SESSION_TIMEOUT_MS
    if interval_ms < session_ms:
        raise SpecError(
            "spec.consumers.maxPollIntervalSeconds",
            f"native delivery needs at least session.timeout.ms ({session_ms} ms, "
            f"spec.kafka.properties or librdkafka's default), got {consumers.max_poll_interval_seconds} s",
        )


def _check_template(template: Mapping[str, Any]) -> None:
    spec = _obj(template.get("spec"), "spec.consumers.template.spec")
    containers = spec.get("containers", [])
    if not isinstance(containers, list):
        raise SpecError("spec.consumers.template.spec.containers", "expected a list of containers")
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping) or not container.get("name"):
            raise SpecError(
                f"spec.consumers.template.spec.containers[{index}].name", "every container needs a name"
            )


def _obj(raw: Any, where: str, *, required: bool = False) -> Mapping[str, Any]:
    if raw is None:
        if required:
            raise SpecError(where, "required")
        return {}
    if not isinstance(raw, Mapping):
        raise SpecError(where, f"expected an object, got {type(raw).__name__}")
    return raw


def _str(raw: Mapping[str, Any], key: str, where: str, *, required: bool = False, default: str = "") -> str:
    value = raw.get(key)
    if value is None:
        if required:
            raise SpecError(where, "required")
        return default
    if not isinstance(value, str) or (required and not value):
        raise SpecError(where, f"expected a non-empty string, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(where, f"expected true or false, got {value!r}")
    return value


def _int_in(value: Any, where: str, low: int, high: int) -> int:
    if value is None:
        raise SpecError(where, "required")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(where, f"expected an integer in [{low}, {high}], got {value!r}")
    return value
