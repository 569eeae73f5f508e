"""The plan ConfigMap `<policy>-plan`: the published plan every consumer watches.

`data` and the pending-release annotation come from `groupops.planner.plan_format` (the format the
consumer runtime reads); this module adds what only the operator uses: the owner reference, the
policy generation the plan was computed for and the identities that took part in planning
(the others hold empty sets), so a restarted operator knows whether to replan; the leader and
its term that wrote it; and a digest of everything the consumers and the handoff read. A plan
whose digest does not match (edited by hand) or is missing is read as lost: the handoff resyncs
from it instead of trusting it (docs/design.md §7, §8).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupops.controller.names import ANNOTATION_GENERATION, ANNOTATION_MEMBERS, plan_configmap_name
from groupops.controller.render_common import PolicyRef, object_meta
from groupops.planner.plan_format import PublishedPlan, plan_from_configmap, plan_to_configmap
from groupops.planner.wire import EPOCH_KEY, PlanFormatError

__all__ = [
    "ANNOTATION_DIGEST",
    "ANNOTATION_LEADER",
    "ANNOTATION_TERM",
    "ObservedPlan",
    "configmap_epoch",
    "configmap_term",
    "plan_digest",
    "read_plan_configmap",
    "render_plan_configmap",
]

ANNOTATION_DIGEST = "groupops.dev/plan-digest"
ANNOTATION_LEADER = "groupops.dev/leader"
ANNOTATION_TERM = "groupops.dev/leader-term"
_DIGESTED_PREFIX = "groupops.dev/"


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedPlan:
    """A plan as found in the cluster, with the operator's notes on it."""

    published: PublishedPlan
    generation: int | None
    members: frozenset[str] | None


def plan_digest(data: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """sha256 over `data` and groupops' annotations (the digest itself excluded)."""
    digested = {
        "data": dict(sorted(data.items())),
        "annotations": {
            key: value
            for key, value in sorted(annotations.items())
            if key.startswith(_DIGESTED_PREFIX) and key != ANNOTATION_DIGEST
        },
    }
    encoded = json.dumps(digested, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def render_plan_configmap(
    policy: PolicyRef,
    published: PublishedPlan,
    *,
    generation: int,
    members: Iterable[str],
    leader: str | None = None,
    term: int | None = None,
) -> dict[str, Any]:
    parts = plan_to_configmap(published)
    annotations = {
        **parts["annotations"],
        ANNOTATION_GENERATION: str(generation),
        ANNOTATION_MEMBERS: ",".join(sorted(members)),
    }
    if leader is not None and term is not None:
        annotations[ANNOTATION_LEADER] = leader
        annotations[ANNOTATION_TERM] = str(term)
    annotations[ANNOTATION_DIGEST] = plan_digest(parts["data"], annotations)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(policy, plan_configmap_name(policy.name), annotations=annotations),
        "data": parts["data"],
    }


def read_plan_configmap(configmap: Mapping[str, Any] | None) -> ObservedPlan | None:
    """The published plan, or None when there is none or it cannot be read (the next plan then
    continues from `configmap_epoch`, so epochs still go forward)."""
    if configmap is None:
        return None
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    if annotations.get(ANNOTATION_DIGEST) != plan_digest(configmap.get("data") or {}, annotations):
        return None
    try:
        published = plan_from_configmap(configmap.get("data") or {}, annotations)
    except PlanFormatError:
        return None
    raw = annotations.get(ANNOTATION_GENERATION)
    generation = int(raw) if raw is not None and raw.isdigit() else None
    raw_members = annotations.get(ANNOTATION_MEMBERS)
    members = None if raw_members is None else frozenset(m for m in raw_members.split(",") if m)
    return ObservedPlan(published=published, generation=generation, members=members)


def configmap_epoch(configmap: Mapping[str, Any] | None) -> int:
    """The epoch a ConfigMap holds, even when the rest of it is unreadable (0 when none)."""
    raw = ((configmap or {}).get("data") or {}).get(EPOCH_KEY, "")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else 0


def configmap_term(configmap: Mapping[str, Any] | None) -> int:
    """The leader term that wrote the plan ConfigMap (-1 when none is recorded)."""
    raw = ((configmap or {}).get("metadata", {}).get("annotations") or {}).get(ANNOTATION_TERM, "")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else -1
