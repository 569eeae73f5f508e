"""The ConsumerGroupPolicy spec as frozen values: parse, default, validate across fields.

Stage: first step of every reconcile (controller/reconcile.py). The CRD's schema
(crds/consumergrouppolicy.yaml) rejects most bad input at the API server; this module repeats
those checks (the operator must not trust that the schema it runs against is the one it ships) and
adds what only the operator can judge against itself, e.g. priorities for identities beyond the
replica count. Every failure is a `SpecError` whose `field` is the path in the resource
(`spec.consumers.priorities.orders-7`).

How, in the style of the `groupops assign` contract (contract.py, docs/design.md §5):
1. msgspec converts the mapping into structs that mirror the schema (`spec_schema.PolicyDoc`):
   types, bounds, lengths, patterns and enums as `Meta` constraints and `Literal`s, the schema's
   defaults as field defaults, and unknown fields refused in every object the schema closes.
   Free-form as in the schema: `kafka.properties` (any key, string values) and the pod
   template's `spec` (a PodSpec, judged by the API server when the pods are created); also each
   lag source's settings object but `static`, as the source parses its own (lag/<type>.py).
2. msgspec's first error becomes a SpecError (`spec_error_from`): its path,
   `$.consumers.priorities[...]`, is followed through the spec and the structs' declared types
   at once, giving `spec.consumers.priorities.orders-7` (msgspec does not name a dict's keys),
   and the message is said from the declared type: `expected an integer in [0, 1000000], got -1`.
3. What a schema cannot say is plain code on the decoded structs: the schema's CEL rules across
   fields, and what only the operator judges (durations like "1m30s", priorities beyond the
   replica count, the onError backoff against maxPollIntervalSeconds, ...).
4. The result is the frozen dataclasses below, the operator's view of the policy (seconds rather
   than "60s", `auth_secret` rather than `authSecretRef.name`). The pod template is handed on as
   written: render_pods copies it and its hash decides rollouts.

Errors: `SpecError` (a ValueError); controller/guard.py's `GuardError` is one.

Pure: a mapping in, `PolicySpec` out.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from groupops.contract import plain_message, split_validation_message
from groupops.controller.spec_schema import (
    APPROVALS,
    DEFAULT_MAX_POLL_INTERVAL_S,
    DELIVERIES,
    ERROR_ACTIONS,
    NATIVE_STRATEGIES,
    ConsumersDoc,
    KafkaDoc,
    LagSourceDoc,
    OnErrorDoc,
    PolicyDoc,
    RebalanceDoc,
    StaticDoc,
    TemplateDoc,
)
from groupops.lag.registry import SOURCE_TYPES
from groupops.planner.damping import ScaleWindows
from groupops.planner.onerror import ErrorAction, total_backoff_s
from groupops.planner.wire import identity_ordinal

__all__ = [
    "APPROVALS",
    "DELIVERIES",
    "ERROR_ACTIONS",
    "NATIVE_STRATEGIES",
    "AutoscaleSpec",
    "CapacitySpec",
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
    "spec_error_from",
]

_LIBRDKAFKA_SESSION_TIMEOUT_MS = 45_000
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
    namespace whose keys are librdkafka properties (sasl.username, ssl.ca.pem, ...).
    `cluster_ref` names a ConsumerGroupCluster: `bootstrap_servers` is then empty until the
    reconcile resolves it (`controller.clusters.resolve`), which also sets `operator_auth`, the
    cluster's (namespace, name) Secret for the operator's own reads."""

    bootstrap_servers: str
    auth_secret: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    cluster_ref: str | None = None
    operator_auth: tuple[str, str] | None = None


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
    """interval_seconds: re-evaluate the plan this often; imbalance_threshold: sooner when the
    published plan's max member lag exceeds its lower bound by this factor; min_improvement: a
    lag-driven plan is published only when it lowers the max member lag by at least this
    fraction; cooldown_seconds: and not sooner than this after the last published plan
    (planner/damping.py); max_moves: cap per rebalance (None: none); approval: auto, or manual (a
    proposal waits in status until `approved_proposal` names its id: docs/design.md §13.1)."""

    interval_seconds: float = 60.0
    imbalance_threshold: float = 1.2
    min_improvement: float = 0.1
    cooldown_seconds: float = 30.0
    max_moves: int | None = None
    approval: str = "auto"
    approved_proposal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoscaleSpec:
    """replicas_for: the count the lag asks for; `windows`: how the operator stabilises it
    (behavior.scaleUp/scaleDown.stabilizationWindowSeconds, `decide.autoscaled_replicas`)."""

    minimum: int
    maximum: int
    target_lag_per_replica: int
    windows: ScaleWindows = field(default_factory=ScaleWindows)

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
class CapacitySpec:
    """`spec.consumers.capacity`: each replica's speed relative to the others (2.0 = twice as fast
    as 1.0), for the lag-aware strategies (`lag`, `balanced`; docs/design.md §3). The identity's
    own entry wins, then its zone's, then `default`."""

    default: float = 1.0
    by_identity: Mapping[str, float] = field(default_factory=dict)
    by_zone: Mapping[str, float] = field(default_factory=dict)

    def of(self, identity: str, zone: str | None) -> float:
        if identity in self.by_identity:
            return self.by_identity[identity]
        if zone is not None and zone in self.by_zone:
            return self.by_zone[zone]
        return self.default


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumersSpec:
    """max_poll_interval_seconds: a replica that makes no progress this long is failed over and
    restarted (consumer/progress.py); with native delivery also librdkafka's max.poll.interval.ms."""

    replicas: int = 1
    autoscale: AutoscaleSpec | None = None
    priorities: Mapping[str, int] = field(default_factory=dict)
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
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
    target_time_lag_seconds: float | None = None
    """The goal in seconds behind (status.timeLagGoal says whether the group meets it)."""


# -- parse -------------------------------------------------------------------------------------------


def parse_duration(text: str, *, where: str) -> float:
    """'60s', '1m30s', '500ms', '2h' -> seconds."""
    if not isinstance(text, str) or not _DURATION.match(text):
        raise SpecError(where, f"expected a duration like 30s, 5m or 1m30s, got {text!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


def parse_policy(spec: Any) -> PolicySpec:
    """Parse `spec` of a ConsumerGroupPolicy; SpecError on the first problem found: msgspec's
    (types, bounds, shapes, unknown fields), then the rules across fields."""
    if spec is None:
        raise SpecError("spec", "required")
    try:
        doc = msgspec.convert(spec, PolicyDoc)
    except msgspec.ValidationError as e:
        raise spec_error_from(str(e), spec) from e
    topics = _topics(doc.topics)
    kafka = _kafka(doc.kafka)
    strategy = StrategySpec(
        type=doc.strategy.type,
        auto_offset_reset=doc.strategy.auto_offset_reset,
        rack_aware=doc.strategy.rack_aware,
        failback=doc.strategy.failback,
    )
    lag_source = _lag_source(doc.lag_source, topics)
    rebalance = _rebalance(doc.rebalance)
    # As written, not rebuilt from `TemplateDoc`: render_pods copies it and its hash decides rollouts.
    template: Mapping[str, Any] = spec.get("consumers", {}).get("template") or {}
    consumers = _consumers(doc.consumers, doc.group_id, strategy, template)
    if consumers.delivery == "native" and rebalance.approval == "manual":
        raise SpecError(
            "spec.rebalance.approval", "manual approval needs delivery: plan (Kafka assigns in native)"
        )
    _check_max_poll_interval(consumers, kafka)
    return PolicySpec(
        kafka=kafka,
        group_id=doc.group_id,
        topics=topics,
        strategy=strategy,
        lag_source=lag_source,
        rebalance=rebalance,
        consumers=consumers,
        dry_run=doc.dry_run,
        target_time_lag_seconds=doc.target_time_lag_seconds,
    )


def _topics(topics: tuple[str, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    for index, topic in enumerate(topics):
        where = f"spec.topics[{index}]"
        if topic in (".", ".."):
            raise SpecError(where, f"not a valid Kafka topic name: {topic!r} (Kafka refuses '.' and '..')")
        if topic in seen:
            raise SpecError(where, f"topic {topic!r} listed twice")
        seen.add(topic)
    return topics


def _kafka(doc: KafkaDoc) -> KafkaSpec:
    for key in doc.properties:
        if "password" in key or key.endswith((".key", ".pem")) or "secret" in key:
            raise SpecError(
                f"spec.kafka.properties.{key}", "secrets belong in the authSecretRef Secret, not the spec"
            )
    if (doc.bootstrap_servers is None) == (doc.cluster_ref is None):
        raise SpecError("spec.kafka.bootstrapServers", "set exactly one of bootstrapServers and clusterRef")
    return KafkaSpec(
        bootstrap_servers=doc.bootstrap_servers or "",
        cluster_ref=doc.cluster_ref.name if doc.cluster_ref else None,
        auth_secret=doc.auth_secret_ref.name if doc.auth_secret_ref else None,
        properties=doc.properties,
    )


def _lag_source(doc: LagSourceDoc, topics: tuple[str, ...]) -> LagSourceSpec:
    kind = doc.type
    for other in SOURCE_TYPES:
        if other != kind and getattr(doc, other, None) is not None:
            raise SpecError(
                f"spec.lagSource.{other}", f"settings for {other!r} but lagSource.type is {kind!r}"
            )
    settings = getattr(doc, kind, None)
    if kind != "kafka" and not settings:
        raise SpecError(f"spec.lagSource.{kind}", f"lagSource.type {kind} needs its settings object")
    if isinstance(settings, StaticDoc):
        for topic in settings.lags:
            if topic not in topics:
                raise SpecError(
                    f"spec.lagSource.static.lags.{topic}", f"topic {topic!r} is not in spec.topics"
                )
        return LagSourceSpec(type=kind, settings={"lags": settings.lags})
    return LagSourceSpec(type=kind, settings=settings or {})


def _rebalance(doc: RebalanceDoc) -> RebalanceSpec:
    interval = parse_duration(doc.interval, where="spec.rebalance.interval")
    if interval < 1:
        raise SpecError("spec.rebalance.interval", "must be at least 1s")
    return RebalanceSpec(
        interval_seconds=interval,
        imbalance_threshold=doc.imbalance_threshold,
        min_improvement=doc.min_improvement,
        cooldown_seconds=float(doc.cooldown_seconds),
        max_moves=doc.max_moves_per_rebalance,
        approval=doc.approval,
        approved_proposal=doc.approved_proposal,
    )


def _consumers(
    doc: ConsumersDoc, group_id: str, strategy: StrategySpec, template: Mapping[str, Any]
) -> ConsumersSpec:
    if doc.replicas is not None and doc.autoscale is not None:
        raise SpecError("spec.consumers.autoscale", "set either replicas or autoscale, not both")
    replicas = 1 if doc.replicas is None else doc.replicas
    autoscale = None
    if doc.autoscale is not None:
        scale = doc.autoscale
        if scale.min > scale.max:
            raise SpecError("spec.consumers.autoscale.min", f"min {scale.min} is above max {scale.max}")
        behavior = scale.behavior
        autoscale = AutoscaleSpec(
            minimum=scale.min,
            maximum=scale.max,
            target_lag_per_replica=scale.target_lag_per_replica,
            windows=ScaleWindows(
                up_seconds=float(behavior.scale_up.stabilization_window_seconds),
                down_seconds=float(behavior.scale_down.stabilization_window_seconds),
            ),
        )
        replicas = scale.min
    if doc.delivery == "native" and strategy.type not in NATIVE_STRATEGIES:
        raise SpecError(
            "spec.consumers.delivery",
            f"native delivery works with {', '.join(sorted(NATIVE_STRATEGIES))} only, not {strategy.type!r}",
        )
    max_replicas = autoscale.maximum if autoscale else replicas
    _check_identities(doc.priorities, "spec.consumers.priorities", group_id, max_replicas)
    _check_identities(doc.capacity.by_identity, "spec.consumers.capacity.byIdentity", group_id, max_replicas)
    if doc.zones and not strategy.rack_aware:
        raise SpecError(
            "spec.consumers.zones", "zones place replicas for rack-aware plans: set strategy.rackAware"
        )
    for zone in doc.capacity.by_zone:
        if zone not in doc.zones:
            raise SpecError(
                f"spec.consumers.capacity.byZone.{zone}",
                f"unknown zone {zone!r}: spec.consumers.zones lists {', '.join(doc.zones)}"
                if doc.zones
                else f"unknown zone {zone!r}: set spec.consumers.zones to place replicas in zones",
            )
    _check_template(doc.template)
    return ConsumersSpec(
        replicas=replicas,
        autoscale=autoscale,
        priorities=doc.priorities,
        capacity=CapacitySpec(
            default=doc.capacity.default,
            by_identity=doc.capacity.by_identity,
            by_zone=doc.capacity.by_zone,
        ),
        delivery=doc.delivery,
        zones=doc.zones,
        template=template,
        max_poll_interval_seconds=doc.max_poll_interval_seconds,
        on_error=_on_error(doc.on_error, doc.max_poll_interval_seconds),
    )


def _check_identities(entries: Mapping[str, Any], where: str, group_id: str, max_replicas: int) -> None:
    """Keys of a per-identity map (priorities, capacity.byIdentity) name replicas the policy runs."""
    for identity in entries:
        ordinal = identity_ordinal(group_id, identity)
        if ordinal is None:
            raise SpecError(
                f"{where}.{identity}",
                f"{identity!r} is not an identity of group {group_id!r} (<groupId>-<ordinal>)",
            )
        if ordinal >= max_replicas:
            raise SpecError(
                f"{where}.{identity}",
                f"unknown identity {identity!r}: the policy runs {group_id}-0..{group_id}-{max_replicas - 1}"
                if max_replicas
                else f"unknown identity {identity!r}: the policy runs no replica",
            )


def _on_error(doc: OnErrorDoc, max_poll_interval: int) -> OnErrorSpec:
    where = "spec.consumers.onError"
    if doc.backoff_seconds is not None:
        waited = total_backoff_s(doc.backoff_seconds, doc.retries)
        if waited > max_poll_interval / 2:
            raise SpecError(
                f"{where}.backoffSeconds",
                f"{doc.retries} retries wait {waited:g} s in all, over half of maxPollIntervalSeconds "
                f"({max_poll_interval}): fewer retries or a shorter backoff",
            )
    topic = doc.dead_letter_topic
    if doc.action == ErrorAction.DEAD_LETTER and topic is None:
        raise SpecError(
            f"{where}.deadLetterTopic", "action deadLetter needs the topic to write failed records to"
        )
    if topic is not None and doc.action != ErrorAction.DEAD_LETTER:
        raise SpecError(f"{where}.deadLetterTopic", f"only used with action deadLetter, not {doc.action!r}")
    return OnErrorSpec(
        retries=doc.retries, backoff_seconds=doc.backoff_seconds, action=doc.action, dead_letter_topic=topic
    )


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


def _check_template(template: TemplateDoc | None) -> None:
    """The one thing render_pods needs of the free-form PodSpec: named containers."""
    containers = ((template.spec if template else None) or {}).get("containers", [])
    if not isinstance(containers, list):
        raise SpecError("spec.consumers.template.spec.containers", "expected a list of containers")
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping) or not container.get("name"):
            raise SpecError(
                f"spec.consumers.template.spec.containers[{index}].name", "every container needs a name"
            )


# -- msgspec's error as a SpecError -----------------------------------------------------------------

_STEP: Final = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_ABSENT: Final = object()
_UNKNOWN_FIELD: Final = "unknown field: not part of the {kind} schema (crds/{file}.yaml)"
_SHOWN_AT_MOST: Final = 80
# Values not repeated in messages: a misplaced secret must not reach status and Events.
_NOT_SHOWN_UNDER: Final = "spec.kafka.properties"


def spec_error_from(
    text: str, spec: Any, root: type = PolicyDoc, kind: str = "ConsumerGroupPolicy"
) -> SpecError:
    """msgspec's first error ("Expected `int` <= 1000 - at `$.consumers.replicas`") as a
    SpecError on the resource path (`spec.consumers.replicas`), in our words. `root`: the struct
    `spec` was converted to (a policy's, or a cluster's: `cluster_spec`), `kind` its resource."""
    message, path = split_validation_message(text)
    where, declared, value = _locate(path, spec, root)
    if message.startswith("Object missing required field `"):
        return SpecError(f"{where}.{message.split('`')[1]}", "required")
    if message.startswith("Object contains unknown field `"):
        unknown = _UNKNOWN_FIELD.format(kind=kind, file=kind.lower())
        return SpecError(f"{where}.{message.split('`')[1]}", unknown)
    shown = value is not _ABSENT and not where.startswith(_NOT_SHOWN_UNDER)
    return SpecError(where, _our_words(message, declared, f", got {_shown(value)}" if shown else ""))


def _locate(path: str, spec: Any, root: type) -> tuple[str, Any, Any]:
    """Follow msgspec's path (`.consumers.priorities[...]`) through the spec and the declared
    types together: the resource path, with the key of a dict's entry where msgspec writes
    `[...]` (the first entry that does not convert: msgspec stops at the first error, in the
    same order), the declared type there, and the value there (_ABSENT where there is none)."""
    where, declared, value = "spec", root, spec
    for name, index in _STEP.findall(path):
        container, _ = _unwrap(declared)
        if name:
            declared = {f.encode_name: f.type for f in msgspec.structs.fields(container)}[name]
            value = value.get(name, _ABSENT) if isinstance(value, Mapping) else _ABSENT
            where = f"{where}.{name}"
        elif index == "...":
            declared = typing.get_args(container)[1]
            key = _failing_key(value, declared)
            value = _ABSENT if key is None else value[key]
            where = f"{where}[...]" if key is None else f"{where}.{key}"
        else:
            declared = typing.get_args(container)[0]
            position = int(index)
            listed = isinstance(value, Sequence) and not isinstance(value, str) and position < len(value)
            value = value[position] if listed else _ABSENT
            where = f"{where}[{index}]"
    return where, declared, value


def _failing_key(entries: Any, declared: Any) -> Any:
    if isinstance(entries, Mapping):
        for key, entry in entries.items():
            try:
                msgspec.convert(entry, declared)
            except msgspec.ValidationError:
                return key
    return None


def _unwrap(declared: Any) -> tuple[Any, Meta | None]:
    """The type without `| None` and `Annotated`, and the outermost Meta on the way."""
    meta: Meta | None = None
    while True:
        origin = typing.get_origin(declared)
        if origin is Annotated:
            declared, *extras = typing.get_args(declared)
            meta = meta or next((extra for extra in extras if isinstance(extra, Meta)), None)
        elif origin is typing.Union or origin is types.UnionType:
            declared = next(arg for arg in typing.get_args(declared) if arg is not type(None))
        else:
            return declared, meta


def _our_words(message: str, declared: Any, got: str) -> str:
    """What the value should be, from the declared type: its description, its choices, its
    range; else msgspec's words ("expected str of length <= 32")."""
    kind, meta = _unwrap(declared)
    if message.endswith("(in a key)"):
        return plain_message(message)
    if meta is not None and meta.description:
        return f"expected {meta.description}{got}"
    if typing.get_origin(kind) is Literal:
        return f"choose one of {', '.join(typing.get_args(kind))}{got}"
    if kind is bool:
        return f"expected true or false{got}"
    if kind in (int, float) and meta is not None and meta.ge is not None and meta.le is not None:
        noun = "an integer" if kind is int else "a number"
        return f"expected {noun} in [{_number(meta.ge)}, {_number(meta.le)}]{got}"
    plain = plain_message(message)
    return plain if ", got " in plain else f"{plain}{got}"


def _number(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_AT_MOST else f"{text[: _SHOWN_AT_MOST - 3]}..."
