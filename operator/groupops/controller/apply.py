"""The generic applier: desired-or-none against what exists -> create, update, delete or nothing.

Each named step of the reconcile hands one object here (Strimzi's ResourceOperator shape). An
object is unchanged when everything the desired object says is already so (fields the API server
adds, such as defaults and status, do not count), except for the fields of EXACT_FIELDS, which
must be equal (a plan ConfigMap with an identity too many is not "the same plus something").

Writes (docs/design.md §13.4):
- ServiceAccounts, Roles and RoleBindings are written with server-side apply under the operator's
  field manager: it creates them or sets exactly the fields the operator states, so labels,
  annotations and fields other writers (a policy engine, a mesh, a person) own stay. An update
  carries the read `resourceVersion` as a precondition: a stale writer gets `Conflict`.
- The plan ConfigMap is one versioned document of the plan protocol: created only if absent
  (`exclusive_create`: whoever created it first wrote a plan from its own reading, which the
  caller must read before writing over it) and replaced whole with compare-and-swap on its
  `resourceVersion`, so that an identity key the plan no longer has is gone (apply would keep a
  key its create left in another manager's name). Labels and annotations of other writers are
  carried over.
- Pods and Leases are only created and deleted (CREATE_ONLY).
"""

from __future__ import annotations

import copy
import enum
import logging
from collections.abc import Mapping
from typing import Any

from groupops.kubeapi import AlreadyExists, KubeClient

__all__ = ["EXACT_FIELDS", "Outcome", "apply", "contains", "is_unchanged"]

EXACT_FIELDS: Mapping[str, frozenset[str]] = {
    "ConfigMap": frozenset({"data"}),
    "Role": frozenset({"rules"}),
    "RoleBinding": frozenset({"subjects", "roleRef"}),
}

OWN_PREFIX = "groupops.dev/"

CREATE_ONLY = frozenset({"Pod", "Lease"})
"""Pods are replaced by the rollout step, not updated in place; a Lease belongs to its consumer
once created (the operator only creates and deletes it)."""


class Outcome(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    UNCHANGED = "unchanged"


def contains(have: Any, want: Any) -> bool:
    """True when `have` says at least everything `want` says (dicts by key, lists item by item)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and contains(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(contains, have, want))
    return bool(have == want)


def is_unchanged(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    exact = EXACT_FIELDS.get(str(desired.get("kind")), frozenset())
    for key, value in desired.items():
        if key in exact:
            if existing.get(key) != value:
                return False
        elif not contains(existing.get(key), value):
            return False
    return True


def apply(
    client: KubeClient,
    desired: Mapping[str, Any] | None,
    existing: Mapping[str, Any] | None,
    *,
    api_version: str = "",
    kind: str = "",
    namespace: str = "",
    name: str = "",
    log: logging.LoggerAdapter[logging.Logger] | logging.Logger | None = None,
    exclusive_create: bool = False,
) -> tuple[Outcome, dict[str, Any] | None]:
    """Make the cluster hold `desired` (None: hold nothing). The identifying keyword arguments are
    needed only to delete (when `desired` is None). Returns the outcome and the object now held.
    `exclusive_create`: a create that meets an existing object raises AlreadyExists instead of
    comparing and replacing it (the plan ConfigMap: whoever created it first wrote a plan from
    its own reading, which the caller must read before writing over it)."""
    logger = log or logging.getLogger(__name__)
    if desired is None:
        if existing is None:
            return Outcome.UNCHANGED, None
        meta = existing.get("metadata", {})
        client.delete(
            api_version or existing["apiVersion"],
            kind or existing["kind"],
            namespace or meta.get("namespace"),
            name or meta["name"],
        )
        logger.info("deleted %s %s", kind or existing.get("kind"), name or meta.get("name"))
        return Outcome.DELETED, None

    kind = str(desired["kind"])
    name = str(desired["metadata"]["name"])
    applied = kind not in CREATE_ONLY and not exclusive_create
    if existing is None:
        if applied:
            created = client.apply(desired)
            logger.info("created %s %s", kind, name)
            return Outcome.CREATED, created
        try:
            created = client.create(desired)
        except AlreadyExists:
            if exclusive_create:
                raise
            existing = client.get(desired["apiVersion"], kind, desired["metadata"].get("namespace"), name)
            if existing is None:  # deleted again in between: the next reconcile creates it
                raise
        else:
            logger.info("created %s %s", kind, name)
            return Outcome.CREATED, created

    if kind in CREATE_ONLY or is_unchanged(existing, desired):
        logger.debug("unchanged %s %s", kind, name)
        return Outcome.UNCHANGED, dict(existing)
    version = existing["metadata"]["resourceVersion"]
    if applied:
        body = copy.deepcopy(dict(desired))
        body["metadata"] = {**body["metadata"], "resourceVersion": version}
        written = client.apply(body)
    else:
        written = client.replace(_with_foreign_metadata(desired, existing, version))
    logger.info("updated %s %s", kind, name)
    return Outcome.UPDATED, written


def _with_foreign_metadata(
    desired: Mapping[str, Any], existing: Mapping[str, Any], version: str
) -> dict[str, Any]:
    """`desired` for a whole replace: the read resourceVersion, and the labels and annotations
    other writers put on the object (keys the desired object does not state and that are not
    in the operator's own `groupops.dev/` space, which a plan drops when it no longer needs them)."""
    body = copy.deepcopy(dict(desired))
    meta = body["metadata"]
    have = existing.get("metadata") or {}
    for field in ("labels", "annotations"):
        foreign = {
            key: value
            for key, value in (have.get(field) or {}).items()
            if key not in (meta.get(field) or {}) and not key.startswith(OWN_PREFIX)
        }
        if foreign:
            meta[field] = {**foreign, **(meta.get(field) or {})}
    meta["resourceVersion"] = version
    return body
