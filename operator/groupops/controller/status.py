"""Status in one place: the conditions and the status object of a policy, and the patch that
changes only what really changed.

Conditions (all five always present, with `observedGeneration`; kstatus' conventions, so that
Flux, Argo CD and `kubectl wait` read them without knowing groupops: docs/design.md §13.2):
    Ready        True when the policy runs as specified (plan published, or reported in a dry run)
    PlanApplied  True when the published plan is the target of the current spec and lag;
                 False with DryRun or AwaitingApproval while a plan waits
    Degraded     True when something is wrong but the last good plan still runs (lag source down,
                 pods rejected)
    Reconciling  True while the operator works toward the spec on its own (partitions waiting for
                 release, replicas not ready yet, a transient failure it retries)
    Stalled      True when nothing moves until a person changes something (an invalid spec, a
                 pod template the guard refuses, a Secret the operator may not read)
`lastTransitionTime` moves only when a condition's status flips (as Kubernetes' meta.SetStatusCondition
does), so a steady policy produces no status write at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONDITION_TYPES",
    "OWNED_STATUS_KEYS",
    "Condition",
    "merge_conditions",
    "status_patch",
]

CONDITION_TYPES = ("Ready", "PlanApplied", "Degraded", "Reconciling", "Stalled")

OWNED_STATUS_KEYS = (
    "observedGeneration",
    "conditions",
    "strategy",
    "epoch",
    "replicas",
    "readyReplicas",
    "members",
    "totalLag",
    "maxMemberLag",
    "imbalance",
    "lastRebalance",
    "proposal",
    "approvedProposal",
    "pipelinePlanApplied",
    "brokerAssignment",
    "offsetReset",
    "timeLagSeconds",
    "timeLagGoal",
    "stuckPartitions",
)
"""The status fields this operator writes; anything else under status (kopf's own progress
records) is left alone."""

_MESSAGE_MAX = 1000


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "True" if self.status else "False"


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    desired: Sequence[Condition],
    *,
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """The conditions to write: `desired` in CONDITION_TYPES order, each keeping its previous
    `lastTransitionTime` unless its status changed (then `now`, an RFC 3339 time)."""
    before = {str(c.get("type")): c for c in previous or []}
    by_type = {c.type: c for c in desired}
    result: list[dict[str, Any]] = []
    for kind in CONDITION_TYPES:
        condition = by_type.get(kind)
        if condition is None:
            continue
        old = before.get(kind)
        transition = now
        if old is not None and old.get("status") == condition.status_text:
            transition = str(old.get("lastTransitionTime") or now)
        result.append(
            {
                "type": kind,
                "status": condition.status_text,
                "reason": condition.reason,
                "message": condition.message[:_MESSAGE_MAX],
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }
        )
    return result


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch for `status` holding only the owned fields that differ; None if nothing
    does. A field absent from `desired` (or None there) but present now is removed (null)."""
    current = current or {}
    patch: dict[str, Any] = {}
    for key in OWNED_STATUS_KEYS:
        want = desired.get(key)
        have = current.get(key)
        if want is None:
            if have is not None:
                patch[key] = None
        elif want != have:
            patch[key] = want
    return patch or None
