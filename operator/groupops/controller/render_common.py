"""What every render function shares: the policy's identity and the metadata of owned objects.

Render functions (render_*.py) are pure: they take frozen values and return the desired object as
a plain dict, exactly what the apply step sends; they make no API call and read no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groupops.controller.names import API_GROUP, API_VERSION, KIND, owned_labels

__all__ = ["PolicyRef", "object_meta", "owner_reference"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyRef:
    """The policy resource that owns what we render."""

    namespace: str
    name: str
    uid: str
    generation: int = 0
    created: str = ""
    """metadata.creationTimestamp (RFC 3339): when the group started, for `latest` (§9.1)."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PolicyRef:
        meta = body.get("metadata", {})
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation", 0) or 0),
            created=str(meta.get("creationTimestamp") or ""),
        )


def owner_reference(policy: PolicyRef) -> dict[str, Any]:
    """Controller reference to the policy: the garbage collector deletes what we own with it."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": policy.name,
        "uid": policy.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    policy: PolicyRef,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": policy.namespace,
        "labels": {**owned_labels(policy.name), **(labels or {})},
        "ownerReferences": [owner_reference(policy)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta
