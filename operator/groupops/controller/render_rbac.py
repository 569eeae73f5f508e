"""The consumers' ServiceAccount, Role and RoleBinding: least privilege for the plan protocol.

A consumer may read and watch its policy's plan ConfigMap and read and update its own Lease;
nothing else (no list of other ConfigMaps, no create: the operator creates the Leases, since
RBAC cannot restrict `create` by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from groupops.controller.names import consumer_account_name, plan_configmap_name
from groupops.controller.render_common import PolicyRef, object_meta

__all__ = ["render_role", "render_role_binding", "render_service_account"]


def render_service_account(policy: PolicyRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(policy, consumer_account_name(policy.name)),
        # The consumer talks to the API server itself; it needs a token, and only this account's.
        "automountServiceAccountToken": True,
    }


def render_role(policy: PolicyRef, lease_names: Sequence[str]) -> dict[str, Any]:
    """`lease_names`: the Leases of every identity that has a pod (sorted for a stable object)."""
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [plan_configmap_name(policy.name)],
            "verbs": ["get", "watch"],
        }
    ]
    if lease_names:
        rules.append(
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": sorted(lease_names),
                "verbs": ["get", "update"],
            }
        )
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(policy, consumer_account_name(policy.name)),
        "rules": rules,
    }


def render_role_binding(policy: PolicyRef) -> dict[str, Any]:
    name = consumer_account_name(policy.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(policy, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": policy.namespace}],
    }
