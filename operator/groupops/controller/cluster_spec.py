"""A ConsumerGroupCluster's spec, parsed as the policy's is (msgspec structs mirroring
crds/consumergroupcluster.yaml, then the checks only the operator makes), into `ClusterSpec`.

Stage: controller, pure (no API call). Called by `controller.clusters` for every cluster its
watch sees; a bad spec becomes the cluster's `Ready=False InvalidSpec` and every policy that
names it is refused with the same message (docs/design.md §15).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from groupops.controller.spec import SpecError, parse_policy, spec_error_from
from groupops.controller.spec_schema import BootstrapServers
from groupops.planner.budget import BudgetLimits

__all__ = [
    "CLUSTER_DEFAULTED",
    "DEFAULT_PORT",
    "ClusterSpec",
    "normalise_server",
    "normalise_servers",
    "parse_cluster",
    "with_policy_defaults",
]

_NamespaceName = Annotated[
    str, Meta(min_length=1, max_length=63, pattern=r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$")
]


class _Doc(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """An object the schema closes: unknown fields are refused, as the API server refuses them."""


class _NamespacedSecretRefDoc(_Doc, frozen=True):
    namespace: Annotated[str, Meta(min_length=1, max_length=63)]
    name: Annotated[str, Meta(min_length=1, max_length=253)]


class _DisruptionBudgetDoc(_Doc, frozen=True):
    max_handoffs_in_flight: Annotated[int, Meta(ge=1, le=10_000)] | None = None
    max_partitions_moved_per_minute: Annotated[int, Meta(ge=1, le=1_000_000)] | None = None


class _RebalanceDefaultsDoc(_Doc, frozen=True):
    interval: str | None = None
    imbalance_threshold: float | None = None
    min_improvement: float | None = None
    cooldown_seconds: int | None = None


class _ConsumerDefaultsDoc(_Doc, frozen=True):
    max_poll_interval_seconds: int | None = None


class _PolicyDefaultsDoc(_Doc, frozen=True):
    """The policy fields a cluster may default: their bounds are the policy's (checked by
    parsing a policy that takes them, `_checked_defaults`)."""

    rebalance: _RebalanceDefaultsDoc | None = None
    consumers: _ConsumerDefaultsDoc | None = None
    target_time_lag_seconds: float | None = None
    lag_source: dict[str, Any] | None = None


CLUSTER_DEFAULTED = (
    ("rebalance", "interval"),
    ("rebalance", "imbalanceThreshold"),
    ("rebalance", "minImprovement"),
    ("rebalance", "cooldownSeconds"),
    ("consumers", "maxPollIntervalSeconds"),
    ("targetTimeLagSeconds",),
    ("lagSource",),
)
"""The policy fields `spec.policyDefaults` may set. The policy CRD gives them no schema default,
so that "not written" reaches the operator; spec.py's defaults apply when neither sets them."""

_REPLACED_WHOLE = frozenset({"lagSource"})
"""Defaults a policy's own object replaces rather than merges into: a lag source's settings
depend on its type, so `{type: prometheus, prometheus: {...}}` under a policy's `{type: kafka}`
would mix two sources."""


class ClusterDoc(_Doc, frozen=True):
    bootstrap_servers: BootstrapServers
    properties: Annotated[dict[str, Annotated[str, Meta(max_length=4096)]], Meta(max_length=64)] = {}
    operator_auth_secret_ref: _NamespacedSecretRefDoc | None = None
    allowed_namespaces: Annotated[list[_NamespaceName], Meta(max_length=1000)] | None = None
    disruption_budget: _DisruptionBudgetDoc | None = None
    policy_defaults: _PolicyDefaultsDoc | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """What policies take from their cluster. `allowed_namespaces` None: every watched namespace."""

    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=dict)
    operator_auth: tuple[str, str] | None = None
    allowed_namespaces: frozenset[str] | None = None
    budget: BudgetLimits | None = None
    policy_defaults: Mapping[str, Any] = field(default_factory=dict)
    """spec.policyDefaults as written (camelCase, only what is set): `with_policy_defaults`."""

    def allows(self, namespace: str) -> bool:
        allowed = self.allowed_namespaces
        return allowed is None or "*" in allowed or namespace in allowed


def parse_cluster(spec: Any) -> ClusterSpec:
    """Parse `spec` of a ConsumerGroupCluster; SpecError (naming the field) on the first problem."""
    if spec is None:
        raise SpecError("spec", "required")
    try:
        doc = msgspec.convert(spec, ClusterDoc)
    except msgspec.ValidationError as e:
        raise spec_error_from(str(e), spec, ClusterDoc, "ConsumerGroupCluster") from e
    for key in doc.properties:
        if "password" in key or key.endswith((".key", ".pem")) or "secret" in key:
            raise SpecError(
                f"spec.properties.{key}", "secrets belong in the operatorAuthSecretRef Secret, not the spec"
            )
    budget = doc.disruption_budget
    limits = (
        None
        if budget is None
        or (budget.max_handoffs_in_flight is None and budget.max_partitions_moved_per_minute is None)
        else BudgetLimits(
            max_handoffs=budget.max_handoffs_in_flight,
            max_partitions_per_minute=budget.max_partitions_moved_per_minute,
        )
    )
    auth = doc.operator_auth_secret_ref
    defaults = _checked_defaults(spec.get("policyDefaults") if isinstance(spec, Mapping) else None)
    return ClusterSpec(
        bootstrap_servers=doc.bootstrap_servers,
        properties=doc.properties,
        operator_auth=None if auth is None else (auth.namespace, auth.name),
        allowed_namespaces=None if doc.allowed_namespaces is None else frozenset(doc.allowed_namespaces),
        budget=limits,
        policy_defaults=defaults,
    )


def with_policy_defaults(defaults: Mapping[str, Any], spec: Any) -> Any:
    """A policy's `spec` with its cluster's `defaults` under it: every field the policy writes
    wins, one level deep (`rebalance.cooldownSeconds` written keeps the cluster's
    `rebalance.interval`), except `lagSource`, taken whole from one or the other. Anything but a
    mapping is returned as it is, for parse_policy to refuse."""
    if not defaults or not isinstance(spec, Mapping):
        return spec
    merged = dict(spec)
    for key, value in defaults.items():
        written = spec.get(key)
        if isinstance(value, Mapping) and isinstance(written, Mapping) and key not in _REPLACED_WHOLE:
            merged[key] = {**value, **written}
        elif key not in spec:
            merged[key] = value
    return merged


_PROBE_POLICY = {"kafka": {"bootstrapServers": "probe:9092"}, "groupId": "probe", "topics": ["probe"]}
"""The smallest valid policy: the defaults are checked by parsing it with them."""


def _checked_defaults(written: Any) -> dict[str, Any]:
    """spec.policyDefaults as written, checked against the policy's own rules; SpecError names
    the field under spec.policyDefaults."""
    if written is None:
        return {}
    lag_source = written.get("lagSource") if isinstance(written, Mapping) else None
    if isinstance(lag_source, Mapping) and lag_source.get("type") == "static":
        raise SpecError(
            "spec.policyDefaults.lagSource.type",
            "static lags belong to one policy's topics, not to a cluster",
        )
    try:
        parse_policy(with_policy_defaults(written, _PROBE_POLICY))
    except SpecError as e:
        raise SpecError(e.field.replace("spec.", "spec.policyDefaults.", 1), e.message) from e
    return {key: dict(value) if isinstance(value, Mapping) else value for key, value in written.items()}


DEFAULT_PORT = "9092"
"""The port of a bootstrap server written without one (librdkafka's default)."""


def normalise_server(server: str) -> str | None:
    """`host:port` as the rule compares it (None: nothing written). `PLAINTEXT://Kafka-1.` ->
    `kafka-1:9092`; `[::1]` -> `[::1]:9092`. A host with several colons and no brackets is an
    IPv6 address without a port."""
    text = server.strip()
    if "://" in text:  # librdkafka takes `[protocol://]host[:port]`
        text = text.split("://", 1)[1]
    if not text:
        return None
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host, port = f"[{inside}]", rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    host = host.lower().rstrip(".")
    port = str(int(port)) if port.isdigit() else port or DEFAULT_PORT
    return f"{host}:{port}" if host else None


def normalise_servers(servers: str) -> frozenset[str]:
    """The normalised servers of a `bootstrapServers` value (comma-separated)."""
    return frozenset(filter(None, (normalise_server(part) for part in servers.split(","))))
