"""From the target assignment to the next plan to publish: the controller's side of the handoff.

The planner gives a target (where every partition should end up). What may be published now
depends on who still owns what, which `groupops.planner.handoff.next_plan` decides (two epochs:
a partition leaves its owner's set, and enters the new owner's only after the old owner
acknowledged that epoch on its Lease or was fenced). This module prepares its inputs from what
the reconcile observed and calls it; the only I/O, fencing a Lease with compare-and-swap, is a
callable the reconcile passes in.

Who is judged expired (and fenced through the previous epoch when it may hold something):
1. a held Lease not renewed within its duration, by the operator's own clock (`LeaseClock`);
2. a Lease nobody ever took (the pod's consumer never started, e.g. no node runs it) whose
   identity still has to give partitions up: it is the source of a pending release, or it takes
   no part any more but keeps a non-empty set. Fencing it by compare-and-swap is safe: a consumer
   that takes the Lease afterwards sees the fence and applies only newer plans. Identities that
   never started and keep their sets are not fenced (they would only force empty epochs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from groupops.controller.identities import LeaseState
from groupops.controller.lease_records import LEASE_RECORDS
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.handoff import HandoffResult, MemberState, fence_epoch, identities_to_fence, next_plan
from groupops.planner.plan_format import PublishedPlan
from groupops.planner.wire import PlanFormatError

__all__ = [
    "Fence",
    "floor_plan",
    "handed_over",
    "held_sets",
    "judged_expired",
    "member_states",
    "moves_between",
    "normalized",
    "step",
]

Assignment = Mapping[str, Sequence[TopicPartition]]
Fence = Callable[[str, int], bool]
"""fence(identity, epoch) -> True when the Lease now says released-through `epoch`; False when
the compare-and-swap lost (the consumer renewed: it is alive after all)."""


def normalized(assignment: Mapping[Any, Iterable[TopicPartition]]) -> dict[str, tuple[TopicPartition, ...]]:
    return {str(identity): tuple(sorted(partitions)) for identity, partitions in assignment.items()}


def floor_plan(strategy: str, epoch: int) -> PublishedPlan:
    """The plan to continue from when the ConfigMap is gone or unreadable: nobody owns anything
    at the highest epoch known (status), so the next epoch still goes forward. It is marked lost
    (the handoff resyncs from it) unless nothing was ever published (epoch 0)."""
    return PublishedPlan(plan=Plan(epoch=epoch, strategy=strategy, assignment={}), lost=epoch > 0)


def member_states(leases: Mapping[str, Mapping[str, object] | None]) -> dict[MemberId, MemberState]:
    """The handoff's reading of each identity's Lease (a malformed report reads as none)."""
    states: dict[MemberId, MemberState] = {}
    for identity, lease in leases.items():
        if lease is None:
            continue
        try:
            record = LEASE_RECORDS.of(lease)
        except PlanFormatError:
            continue
        spec = lease.get("spec")
        held = isinstance(spec, Mapping) and bool(spec.get("holderIdentity"))
        states[MemberId(identity)] = MemberState.from_record(record, held=held)
    return states


def judged_expired(
    previous: PublishedPlan, leases: Mapping[str, LeaseState], members: frozenset[str]
) -> list[MemberId]:
    """See the module docstring."""
    releasing_from = {release.identity for release in previous.releasing.values()}
    judged: list[MemberId] = []
    for identity, state in sorted(leases.items()):
        if state.expired or (
            not state.held
            and (
                identity in releasing_from
                or (identity not in members and previous.plan.assignment.get(MemberId(identity)))
            )
        ):
            judged.append(MemberId(identity))
    return judged


def step(
    previous: PublishedPlan,
    target: Mapping[str, Sequence[TopicPartition]],
    *,
    leases: Mapping[str, LeaseState],
    lease_objects: Mapping[str, Mapping[str, object] | None],
    members: frozenset[str],
    strategy: str,
    now: float,
    fence: Fence,
) -> HandoffResult:
    """Fence who must be fenced, then ask the handoff for the next plan towards `target`."""
    states = member_states(lease_objects)
    candidates = identities_to_fence(previous, states, judged_expired(previous, leases, members))
    through = fence_epoch(previous, states)
    fenced = [identity for identity in candidates if fence(identity, through)]
    typed_target = {MemberId(identity): tuple(tps) for identity, tps in target.items()}
    return next_plan(previous, typed_target, states, expired=fenced, strategy=strategy, now=now)


def handed_over(before: PublishedPlan | None, after: PublishedPlan) -> int:
    """Partitions that changed hands from `before` to `after`: held (owned, or being released) by
    one identity before and by another after. A two-epoch handoff counts once, at the epoch that
    grants the partition to its new owner (at the first it is still its old owner's, releasing);
    a partition given out for the first time, or dropped, is no move. What the moves metric and a
    cluster's disruption budget count (design §15)."""
    if before is None:
        return 0
    held_before, held_after = _holders(before), _holders(after)
    return sum(1 for tp, holder in held_after.items() if held_before.get(tp, holder) != holder)


def _holders(plan: PublishedPlan) -> dict[TopicPartition, str]:
    held = {tp: str(release.identity) for tp, release in plan.releasing.items()}
    held.update({tp: str(identity) for identity, tps in plan.plan.assignment.items() for tp in tps})
    return held


def held_sets(plan: PublishedPlan) -> dict[str, tuple[TopicPartition, ...]]:
    """Each identity's partitions held now (`_holders`): its set in the plan plus those it is still
    releasing; every identity of the plan is a key, so with nothing releasing this is
    `normalized(plan.plan.assignment)`. The figures "before" a plan (status `imbalance`, the
    Event's "was") are of this: the plan alone leaves a move's partitions out until they are
    granted, and would show their old owner lighter than it is."""
    held: dict[str, list[TopicPartition]] = {str(identity): [] for identity in plan.plan.assignment}
    for tp, holder in _holders(plan).items():
        held.setdefault(holder, []).append(tp)
    return {identity: tuple(sorted(tps)) for identity, tps in held.items()}


def moves_between(before: Assignment, after: Assignment, *, among: frozenset[str] | None = None) -> int:
    """Partitions whose owner in `before` (restricted to `among` when given) differs in `after`."""
    owner_after = {tp: identity for identity, tps in after.items() for tp in tps}
    return sum(
        1
        for identity, tps in before.items()
        if among is None or identity in among
        for tp in tps
        if owner_after.get(tp) != identity
    )
