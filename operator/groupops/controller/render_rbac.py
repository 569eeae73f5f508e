"""Each consumer replica's ServiceAccount, Role and RoleBinding: least privilege for the plan
protocol (docs/design.md §13.3).

A replica may read and watch its policy's plan ConfigMap and read and update its own Lease;
nothing else: not a sibling's Lease (a replica that could write it could keep a dead sibling
alive or fence a live one), no list of other ConfigMaps, no create (the operator creates the
Leases, since RBAC cannot restrict `create` by name). One account per ordinal: the pod of an
ordinal may be replaced, its identity and rights stay.
"""

from __future__ import annotations

from typing import Any

from groupops.controller.names import LABEL_ORDINAL, consumer_account_name, plan_configmap_name
from groupops.controller.render_common import PolicyRef, object_meta

__all__ = ["render_role", "render_role_binding", "render_service_account"]


def _meta(policy: PolicyRef, ordinal: int) -> dict[str, Any]:
    return object_meta(
        policy, consumer_account_name(policy.name, ordinal), labels={LABEL_ORDINAL: str(ordinal)}
    )


def render_service_account(policy: PolicyRef, ordinal: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(policy, ordinal),
        # The consumer talks to the API server itself; it needs a token, and only this account's.
        "automountServiceAccountToken": True,
    }


def render_role(policy: PolicyRef, ordinal: int, lease: str) -> dict[str, Any]:
    """`lease`: the Lease of the ordinal's identity."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(policy, ordinal),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [plan_configmap_name(policy.name)],
                "verbs": ["get", "watch"],
            },
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [lease],
                "verbs": ["get", "update"],
            },
        ],
    }


def render_role_binding(policy: PolicyRef, ordinal: int) -> dict[str, Any]:
    name = consumer_account_name(policy.name, ordinal)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(policy, ordinal),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": policy.namespace}],
    }
