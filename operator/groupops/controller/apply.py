"""The generic applier: desired-or-none against what exists -> create, update, delete or nothing.

Each named step of the reconcile hands one object here (Strimzi's ResourceOperator shape). An
object is unchanged when everything the desired object says is already so (fields the API server
adds, such as defaults and status, do not count), except for the fields of EXACT_FIELDS, which
must be equal (a plan ConfigMap with an identity too many is not "the same plus something").

Updates are full replaces carrying the read `resourceVersion`, so two writers can never interleave
silently: a stale one gets `Conflict` and re-reads (the plan's epoch relies on this). A create that
meets an existing object (a restart raced its own earlier create) re-reads and compares instead of
failing, so re-running a step is always safe; except for the plan ConfigMap (`exclusive_create`),
which is never written over without being read first.
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
    if existing is None:
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
    body = copy.deepcopy(dict(desired))
    body["metadata"] = {**body["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}
    replaced = client.replace(body)
    logger.info("updated %s %s", kind, name)
    return Outcome.UPDATED, replaced
