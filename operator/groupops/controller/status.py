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
    "FIGURE_KEYS",
    "MEMBER_FIGURE_KEYS",
    "OWNED_STATUS_KEYS",
    "Condition",
    "figures_only",
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

FIGURE_KEYS = ("totalLag", "maxMemberLag", "imbalance", "timeLagSeconds")
"""The status fields that follow the lag from read to read: a busy group's change at every run
(docs/design.md §8.3, "a figures-only status change waits")."""

MEMBER_FIGURE_KEYS = ("lag", "timeLagSeconds", "progress")
"""The same figures, per member (`status.members[]`), and the ages of a lagging member's progress
(`progress`: seconds since its last poll, advance and commit, and when they were heard), which
grow at every heartbeat while it is shown."""

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


def figures_only(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """The patch from `current` to `desired` moves lag figures only: every other owned field is
    equal (conditions, epoch, each member's partitions and state), the members are the same in the
    same order, and every figure that differs is a number on both sides that does not cross zero
    (a figure appearing, disappearing, or a lag reaching or leaving 0 is news and counts as a
    change), or a member's progress whose fields stayed the same. False when nothing differs at
    all (there is no patch to hold back)."""
    current = current or {}
    if status_patch(current, desired) is None:
        return False
    if status_patch(_without_figures(current), _without_figures(desired)) is not None:
        return False
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any], tuple[str, ...]]] = [
        (current, desired, FIGURE_KEYS)
    ]
    pairs += [
        (have, want, MEMBER_FIGURE_KEYS)
        for have, want in zip(current.get("members") or [], desired.get("members") or [], strict=True)
    ]
    return all(_moved_quietly(have.get(key), want.get(key)) for have, want, keys in pairs for key in keys)


def _without_figures(status: Mapping[str, Any]) -> dict[str, Any]:
    bare = {key: value for key, value in status.items() if key not in FIGURE_KEYS}
    members = status.get("members")
    if isinstance(members, list):
        bare["members"] = [
            {key: value for key, value in member.items() if key not in MEMBER_FIGURE_KEYS}
            if isinstance(member, Mapping)
            else member
            for member in members
        ]
    return bare


def _moved_quietly(have: Any, want: Any) -> bool:
    """Both numbers, and neither or both 0: a move between 0 and anything else is news of its own
    (caught up, or not). Or both a member's progress with the same fields: its ages moved."""
    if have == want:
        return True
    if isinstance(have, Mapping) and isinstance(want, Mapping):
        return have.keys() == want.keys()
    if not _is_number(have) or not _is_number(want):
        return False
    return bool((have == 0) == (want == 0))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
