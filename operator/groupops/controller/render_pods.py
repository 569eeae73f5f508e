"""Consumer pods, one per identity, and the Lease each identity acknowledges on.

A pod is the policy's `consumers.template` plus what makes it this identity's consumer: the
ServiceAccount, the labels the operator finds it by, the environment the runtime reads, the auth
Secret mounted by reference (never copied), and zone affinity when the plan is rack-aware.

Environment of the consumer container (read by `groupops consume`):
    GROUPOPS_POLICY, GROUPOPS_NAMESPACE, GROUPOPS_POD_NAME   which policy and pod this is
    GROUPOPS_IDENTITY                 group.instance.id `<groupId>-<ordinal>`
    GROUPOPS_GROUP_ID, GROUPOPS_TOPICS (comma-separated), GROUPOPS_STRATEGY, GROUPOPS_DELIVERY,
    GROUPOPS_AUTO_OFFSET_RESET
    GROUPOPS_KAFKA_BOOTSTRAP_SERVERS, GROUPOPS_KAFKA_PROPERTIES (JSON of non-secret librdkafka
    properties), GROUPOPS_KAFKA_AUTH_DIR (one file per secret property, when authSecretRef is set)
    GROUPOPS_PLAN_CONFIGMAP, GROUPOPS_LEASE_NAME, GROUPOPS_LEASE_DURATION_SECONDS
    GROUPOPS_MAX_POLL_INTERVAL_SECONDS  spec.consumers.maxPollIntervalSeconds (stuck replicas exit)

The template hash covers everything above that is the same for every identity; a pod whose
`groupops.dev/template-hash` label differs is replaced (one at a time, after a handoff).
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
    consumer_account_name,
    lease_name,
    owned_labels,
    plan_configmap_name,
    pod_name,
)
from groupops.controller.render_common import PolicyRef, object_meta, owner_reference
from groupops.controller.settings import ConsumerSettings
from groupops.controller.spec import PolicySpec

__all__ = [
    "AUTH_MOUNT_PATH",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    """One replica: its ordinal, identity (group.instance.id) and zone (rack-aware placement)."""

    ordinal: int
    identity: str
    zone: str | None = None


CONSUMER_METRICS_PORT = 9400
"""Where each replica serves its Prometheus metrics (port `metrics`) unless its template sets
GROUPOPS_METRICS_PORT itself."""


def _shared_env(policy: PolicyRef, spec: PolicySpec, lease_seconds: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "GROUPOPS_POLICY", "value": policy.name},
        {"name": "GROUPOPS_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GROUPOPS_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GROUPOPS_GROUP_ID", "value": spec.group_id},
        {"name": "GROUPOPS_TOPICS", "value": ",".join(spec.topics)},
        {"name": "GROUPOPS_STRATEGY", "value": spec.strategy.type},
        {"name": "GROUPOPS_DELIVERY", "value": spec.consumers.delivery},
        {"name": "GROUPOPS_AUTO_OFFSET_RESET", "value": spec.strategy.auto_offset_reset},
        {"name": "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS", "value": spec.kafka.bootstrap_servers},
        {
            "name": "GROUPOPS_KAFKA_PROPERTIES",
            "value": json.dumps(dict(sorted(spec.kafka.properties.items())), separators=(",", ":")),
        },
        {"name": "GROUPOPS_PLAN_CONFIGMAP", "value": plan_configmap_name(policy.name)},
        {"name": "GROUPOPS_LEASE_DURATION_SECONDS", "value": str(lease_seconds)},
        {
            "name": "GROUPOPS_MAX_POLL_INTERVAL_SECONDS",
            "value": str(spec.consumers.max_poll_interval_seconds),
        },
    ]
    if spec.kafka.auth_secret:
        env.append({"name": "GROUPOPS_KAFKA_AUTH_DIR", "value": AUTH_MOUNT_PATH})
    return env


def template_hash(policy: PolicyRef, spec: PolicySpec, settings: ConsumerSettings, lease_seconds: int) -> str:
    """Hash of everything every pod of the policy shares (template, shared env, image defaults)."""
    material = {
        "template": spec.consumers.template,
        "env": _shared_env(policy, spec, lease_seconds),
        "auth": spec.kafka.auth_secret,
        "image": settings.image,
        "command": list(settings.command),
    }
    if settings.heartbeat_addresses:  # absent when off, so turning them on is one rollout
        material["heartbeat"] = list(settings.heartbeat_addresses)
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
        *_shared_env(policy, spec, lease_seconds),
        {"name": "GROUPOPS_IDENTITY", "value": slot.identity},
        {"name": "GROUPOPS_LEASE_NAME", "value": lease_name(policy.name, slot.identity)},
    ]
    if settings.heartbeat_addresses:
        env.append({"name": "GROUPOPS_HEARTBEAT_ADDRESSES", "value": ",".join(settings.heartbeat_addresses)})
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
    pod_spec["serviceAccountName"] = consumer_account_name(policy.name)
    pod_spec.setdefault("restartPolicy", "Always")
    if slot.zone is not None:
        pod_spec["affinity"] = _with_zone(pod_spec.get("affinity"), slot.zone)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


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
