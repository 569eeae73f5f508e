"""Consumer pods, one per identity, and the Lease each identity acknowledges on.

A pod is the policy's `consumers.template` plus what makes it this identity's consumer: the
ServiceAccount, the labels the operator finds it by, the environment the runtime reads, the auth
Secret mounted by reference (never copied), and, when the policy has `zones`, its zone twice:
as required node affinity (where it runs) and as librdkafka's `client.rack` (what Kafka is told),
so the broker-side rack features see the zone the pod was placed in: the leader's rack-aware
assignors with `delivery: native` (KIP-881) and follower fetching with either delivery (KIP-392,
when the brokers run a rack-aware replica selector). Zone names must be the brokers'
`broker.rack` values for either to apply.

Environment of the consumer container (read by `groupops consume`):
    GROUPOPS_POLICY, GROUPOPS_NAMESPACE, GROUPOPS_POD_NAME   which policy and pod this is
    GROUPOPS_POD_UID                  the pod's UID, part of the process's incarnation: the pod's
                                      status then proves the process gone (planner/exits.py)
    GROUPOPS_IDENTITY                 group.instance.id `<groupId>-<ordinal>`
    GROUPOPS_GROUP_ID, GROUPOPS_TOPICS (comma-separated), GROUPOPS_STRATEGY, GROUPOPS_DELIVERY,
    GROUPOPS_AUTO_OFFSET_RESET
    GROUPOPS_KAFKA_BOOTSTRAP_SERVERS, GROUPOPS_KAFKA_PROPERTIES (JSON of non-secret librdkafka
    properties; with zones also `client.rack` = the pod's zone, over the policy's own value),
    GROUPOPS_KAFKA_AUTH_DIR (one file per secret property, when authSecretRef is set)
    GROUPOPS_PLAN_CONFIGMAP, GROUPOPS_LEASE_NAME, GROUPOPS_LEASE_DURATION_SECONDS
    GROUPOPS_MAX_POLL_INTERVAL_SECONDS  spec.consumers.maxPollIntervalSeconds (stuck replicas exit)
    GROUPOPS_GROUP_STARTED            the policy's creationTimestamp (where `latest` starts, §9.1)
    GROUPOPS_ON_ERROR_RETRIES, _BACKOFF_SECONDS, _ACTION, GROUPOPS_DEAD_LETTER_TOPIC
                                      spec.consumers.onError, only the fields the policy sets (§9.2)

The template hash covers everything above that is the same for every identity (the properties
without the zone); a pod whose `groupops.dev/template-hash` label differs is replaced (one at a
time, after a handoff), and so is one whose `groupops.dev/zone` label is not its slot's zone (a
change of consumers.zones).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groupops.controller.names import (
    ANNOTATION_IDENTITY,
    LABEL_ORDINAL,
    LABEL_TEMPLATE_HASH,
    LABEL_ZONE,
    consumer_account_name,
    lease_name,
    owned_labels,
    plan_configmap_name,
    pod_name,
)
from groupops.controller.podguard import harden_pod_template
from groupops.controller.render_common import PolicyRef, object_meta, owner_reference
from groupops.controller.settings import ConsumerSettings
from groupops.controller.spec import OnErrorSpec, PolicySpec

__all__ = [
    "AUTH_MOUNT_PATH",
    "CLIENT_RACK",
    "CONSUMER_CONTAINER",
    "ZONE_LABEL",
    "Slot",
    "render_lease",
    "render_pod",
    "template_hash",
]

CONSUMER_CONTAINER = "consumer"
AUTH_MOUNT_PATH = "/etc/groupops/kafka-auth"
AUTH_VOLUME = "groupops-kafka-auth"
ZONE_LABEL = "topology.kubernetes.io/zone"
RENDERING = 2
"""Bumped when every policy's pods are rendered differently (2: one ServiceAccount per ordinal and
the guard's secure defaults, docs/design.md §13.3), so that an upgrade rolls them one at a time."""
CLIENT_RACK = "client.rack"
"""The librdkafka property that carries a pod's zone to Kafka (KIP-881 assignors, KIP-392)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    """One replica: its ordinal, identity (group.instance.id) and zone (rack-aware placement)."""

    ordinal: int
    identity: str
    zone: str | None = None


CONSUMER_METRICS_PORT = 9400
"""Where each replica serves its Prometheus metrics (port `metrics`) unless its template sets
GROUPOPS_METRICS_PORT itself."""


def _kafka_properties(spec: PolicySpec, zone: str | None) -> str:
    """GROUPOPS_KAFKA_PROPERTIES: the policy's non-secret librdkafka properties as sorted JSON;
    with a zone, `client.rack` is that zone whatever the policy says (the pod runs there)."""
    properties = dict(spec.kafka.properties)
    if zone is not None:
        properties[CLIENT_RACK] = zone
    return json.dumps(dict(sorted(properties.items())), separators=(",", ":"))


def _shared_env(
    policy: PolicyRef, spec: PolicySpec, lease_seconds: int, *, zone: str | None = None
) -> list[dict[str, Any]]:
    """The environment of every pod of the policy; `zone` (the slot's) only changes the Kafka
    properties, and the template hash is taken without it."""
    env: list[dict[str, Any]] = [
        {"name": "GROUPOPS_POLICY", "value": policy.name},
        {"name": "GROUPOPS_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GROUPOPS_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GROUPOPS_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "GROUPOPS_GROUP_ID", "value": spec.group_id},
        {"name": "GROUPOPS_TOPICS", "value": ",".join(spec.topics)},
        {"name": "GROUPOPS_STRATEGY", "value": spec.strategy.type},
        {"name": "GROUPOPS_DELIVERY", "value": spec.consumers.delivery},
        {"name": "GROUPOPS_AUTO_OFFSET_RESET", "value": spec.strategy.auto_offset_reset},
        {"name": "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS", "value": spec.kafka.bootstrap_servers},
        {"name": "GROUPOPS_KAFKA_PROPERTIES", "value": _kafka_properties(spec, zone)},
        {"name": "GROUPOPS_PLAN_CONFIGMAP", "value": plan_configmap_name(policy.name)},
        {"name": "GROUPOPS_LEASE_DURATION_SECONDS", "value": str(lease_seconds)},
        {
            "name": "GROUPOPS_MAX_POLL_INTERVAL_SECONDS",
            "value": str(spec.consumers.max_poll_interval_seconds),
        },
    ]
    if policy.created:
        env.append({"name": "GROUPOPS_GROUP_STARTED", "value": policy.created})
    env.extend(_on_error_env(spec))
    if spec.kafka.auth_secret:
        env.append({"name": "GROUPOPS_KAFKA_AUTH_DIR", "value": AUTH_MOUNT_PATH})
    return env


def _on_error_env(spec: PolicySpec) -> list[dict[str, str]]:
    """spec.consumers.onError as variables, only where it differs from the runtime's defaults (a
    policy that never set it keeps its pods' template hash)."""
    on_error, default = spec.consumers.on_error, OnErrorSpec()
    env: list[dict[str, str]] = []
    if on_error.retries != default.retries:
        env.append({"name": "GROUPOPS_ON_ERROR_RETRIES", "value": str(on_error.retries)})
    if on_error.backoff_seconds is not None:
        env.append({"name": "GROUPOPS_ON_ERROR_BACKOFF_SECONDS", "value": f"{on_error.backoff_seconds:g}"})
    if on_error.action != default.action:
        env.append({"name": "GROUPOPS_ON_ERROR_ACTION", "value": on_error.action})
    if on_error.dead_letter_topic:
        env.append({"name": "GROUPOPS_DEAD_LETTER_TOPIC", "value": on_error.dead_letter_topic})
    return env


def template_hash(policy: PolicyRef, spec: PolicySpec, settings: ConsumerSettings, lease_seconds: int) -> str:
    """Hash of everything every pod of the policy shares (template, shared env, image defaults)."""
    material = {
        "template": spec.consumers.template,
        "env": _shared_env(policy, spec, lease_seconds),
        "auth": spec.kafka.auth_secret,
        "image": settings.image,
        "command": list(settings.command),
        "rendering": RENDERING,
    }
    if settings.heartbeat_addresses:  # absent when off, so turning them on is one rollout
        material["heartbeat"] = list(settings.heartbeat_addresses)
    if settings.heartbeat_interval_seconds is not None:  # likewise: unset renders and rolls nothing
        material["heartbeat_interval"] = f"{settings.heartbeat_interval_seconds:g}"
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:12]


def render_pod(
    policy: PolicyRef,
    spec: PolicySpec,
    slot: Slot,
    *,
    settings: ConsumerSettings,
    lease_seconds: int,
) -> dict[str, Any]:
    """The desired pod of `slot`. Deterministic: the same inputs give the same dict."""
    template = copy.deepcopy(dict(spec.consumers.template))
    template_meta: Mapping[str, Any] = template.get("metadata") or {}
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    labels = {
        **(template_meta.get("labels") or {}),
        **owned_labels(policy.name),
        LABEL_ORDINAL: str(slot.ordinal),
        LABEL_TEMPLATE_HASH: template_hash(policy, spec, settings, lease_seconds),
        **({LABEL_ZONE: slot.zone} if slot.zone is not None else {}),
    }
    annotations = {**(template_meta.get("annotations") or {}), ANNOTATION_IDENTITY: slot.identity}
    metadata = object_meta(
        policy, pod_name(policy.name, slot.ordinal), labels=labels, annotations=annotations
    )
    metadata["ownerReferences"] = [owner_reference(policy)]

    containers = [dict(c) for c in pod_spec.get("containers") or []]
    index = next((i for i, c in enumerate(containers) if c.get("name") == CONSUMER_CONTAINER), 0)
    if not containers:
        containers.append({"name": CONSUMER_CONTAINER})
    container = containers[index]
    if not container.get("image"):
        container["image"] = settings.image
        container.setdefault("command", list(settings.command))
    env = [
        *_shared_env(policy, spec, lease_seconds, zone=slot.zone),
        {"name": "GROUPOPS_IDENTITY", "value": slot.identity},
        {"name": "GROUPOPS_LEASE_NAME", "value": lease_name(policy.name, slot.identity)},
    ]
    if settings.heartbeat_addresses:
        env.append({"name": "GROUPOPS_HEARTBEAT_ADDRESSES", "value": ",".join(settings.heartbeat_addresses)})
    if settings.heartbeat_interval_seconds is not None:
        interval = f"{settings.heartbeat_interval_seconds:g}"
        env.append({"name": "GROUPOPS_HEARTBEAT_INTERVAL_SECONDS", "value": interval})
    ours = {item["name"] for item in env}
    theirs = [item for item in container.get("env") or [] if item.get("name") not in ours]
    if not any(item.get("name") == "GROUPOPS_METRICS_PORT" for item in theirs):
        env += [
            {"name": "GROUPOPS_METRICS_PORT", "value": str(CONSUMER_METRICS_PORT)},
            {"name": "GROUPOPS_METRICS_HOST", "value": "0.0.0.0"},  # all of the pod: Prometheus scrapes it
        ]
        ports = [port for port in container.get("ports") or [] if port.get("name") != "metrics"]
        container["ports"] = [*ports, {"name": "metrics", "containerPort": CONSUMER_METRICS_PORT}]
    container["env"] = theirs + env
    if spec.kafka.auth_secret:
        mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != AUTH_VOLUME]
        container["volumeMounts"] = [
            *mounts,
            {"name": AUTH_VOLUME, "mountPath": AUTH_MOUNT_PATH, "readOnly": True},
        ]
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != AUTH_VOLUME]
        pod_spec["volumes"] = [
            *volumes,
            {"name": AUTH_VOLUME, "secret": {"secretName": spec.kafka.auth_secret, "defaultMode": 0o440}},
        ]
    containers[index] = container
    pod_spec["containers"] = containers
    pod_spec["serviceAccountName"] = consumer_account_name(policy.name, slot.ordinal)
    pod_spec.setdefault("restartPolicy", "Always")
    if slot.zone is not None:
        pod_spec["affinity"] = _with_zone(pod_spec.get("affinity"), slot.zone)
    # Secure defaults where the template says nothing (the guard refused what it says unsafely).
    return harden_pod_template({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec})


def _with_zone(affinity: Any, zone: str) -> dict[str, Any]:
    """Add a required node-affinity term for `zone` to every term of the template's affinity."""
    result: dict[str, Any] = copy.deepcopy(dict(affinity or {}))
    node = result.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    expression = {"key": ZONE_LABEL, "operator": "In", "values": [zone]}
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), expression]} for term in terms
    ]
    return result


def render_lease(policy: PolicyRef, identity: str, *, lease_seconds: int) -> dict[str, Any]:
    """An unheld Lease for `identity`; the consumer takes it (holderIdentity) and renews it."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": object_meta(policy, lease_name(policy.name, identity)),
        "spec": {"leaseDurationSeconds": lease_seconds},
    }
