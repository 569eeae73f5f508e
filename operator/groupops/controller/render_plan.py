"""The plan ConfigMap `<policy>-plan`: the published plan every consumer watches.

`data` and the pending-release annotation come from `groupops.planner.plan_format` (the format the
consumer runtime reads); this module adds what only the operator uses: the owner reference, the
policy generation the plan was computed for and the identities that took part in planning
(the others hold empty sets), so a restarted operator knows whether to replan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupops.controller.names import ANNOTATION_GENERATION, ANNOTATION_MEMBERS, plan_configmap_name
from groupops.controller.render_common import PolicyRef, object_meta
from groupops.planner.plan_format import PublishedPlan, plan_from_configmap, plan_to_configmap
from groupops.planner.wire import EPOCH_KEY, PlanFormatError

__all__ = ["ObservedPlan", "configmap_epoch", "read_plan_configmap", "render_plan_configmap"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedPlan:
    """A plan as found in the cluster, with the operator's notes on it."""

    published: PublishedPlan
    generation: int | None
    members: frozenset[str] | None


def render_plan_configmap(
    policy: PolicyRef, published: PublishedPlan, *, generation: int, members: Iterable[str]
) -> dict[str, Any]:
    parts = plan_to_configmap(published)
    annotations = {
        **parts["annotations"],
        ANNOTATION_GENERATION: str(generation),
        ANNOTATION_MEMBERS: ",".join(sorted(members)),
    }
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
