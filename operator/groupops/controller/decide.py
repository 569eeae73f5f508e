"""The plan decision of one reconcile: target, trigger, damping, manual approval, dry run; and
the autoscaled replica count.

Pure apart from the run's context, which it reads, and the policy's damping memory, which it
updates: given the spec, the lag, the identities and the published plan it returns a `Decision`
(where partitions should go, or nothing to do, and what status shows); the reconcile then runs
the handoff step towards that target and publishes.
Triggers: first those that keep the plan correct (`planner.target.rebalance_trigger`), never
held; then, only when none fired, the damped ones (`planner.damping`: counts left uneven by the
move budget after the cooldown; lag-driven replans after the cooldown, with hysteresis around
imbalanceThreshold, and only when the new plan improves enough). A spec change that touches only
lag readings or damping settings (`target_inputs_digest`) is a lag change, not `SpecChanged`
(docs/design.md §6.5).
Manual approval: a plan that moves partitions between taking-part identities waits in
status.proposal, under an id, until spec.rebalance.approvedProposal names that id; an id approves
once (docs/design.md §13.1).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from groupops.controller.clusters import badness_of
from groupops.controller.context import RunContext, iso
from groupops.controller.identities import IdentityView
from groupops.controller.pipeline_plan import pipeline_plan
from groupops.controller.publish import held_sets, moves_between, normalized
from groupops.controller.render_plan import ObservedPlan
from groupops.controller.spec import AutoscaleSpec, PolicySpec
from groupops.lag import LagSnapshot
from groupops.model import TopicPartition
from groupops.planner.damping import (
    Damped,
    DampingSettings,
    Figures,
    Recommendation,
    count_shortfall,
    damp,
    record,
    stabilize,
)
from groupops.planner.plan_format import PublishedPlan
from groupops.planner.target import (
    Target,
    TargetRequest,
    Trigger,
    rebalance_trigger,
    stats_of,
)

__all__ = [
    "PIPELINE_TRIGGER",
    "Decision",
    "assignment_from_status",
    "assignment_to_status",
    "autoscaled_replicas",
    "damping_settings",
    "decide",
    "seconds_since",
    "target_inputs_digest",
]


PIPELINE_TRIGGER = "PipelinePlan"
"""The proposal's trigger when it is the Spark pipeline's plan (`groupops propose`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What the plan step decided. `target`: where partitions should end up (None: keep the
    published plan); `shown`: the assignment status reports; `proposal`: status.proposal."""

    target: dict[str, tuple[TopicPartition, ...]] | None
    members: frozenset[str]
    shown: dict[str, tuple[TopicPartition, ...]]
    trigger: str | None
    moves: int
    max_lag_before: float | None
    max_lag_after: float
    imbalance: float
    proposal: dict[str, Any] | None = None
    approved: bool = False
    approved_id: str | None = None
    approval_note: str | None = None  # why spec.rebalance.approvedProposal approved nothing
    waiting: str | None = None  # "DryRun" / "AwaitingApproval" / "WaitingForBudget" / None
    budget_note: str | None = None  # why the disruption budget held the rebalance
    budget_granted: bool = False  # the budget granted it (and counted its moves)
    pipeline_plan_applied: str | None = None  # the pipeline plan's id, when this publishes it
    published: bool = False
    damping_quiet_s: float = 0.0
    """How long damping decides nothing new on the same figures (`Damped.quiet_s`; 0 when it did
    not run): a settled policy's skipped ticks must not outlast it (`settled`)."""


def decide(  # noqa: PLR0917 - one call site, the reconcile's named steps
    run: RunContext,
    spec: PolicySpec,
    snapshot: LagSnapshot,
    topics: Mapping[str, int],
    view: IdentityView,
    observed: ObservedPlan | None,
    previous: PublishedPlan,
    *,
    paused: frozenset[TopicPartition] = frozenset(),
) -> Decision:
    """`paused`: partitions an offset reset holds back (controller/offset_reset.py): nobody gets
    them, and while they are paused only a change of members or spec replans the others."""
    current = normalized(previous.plan.assignment)
    request = TargetRequest(
        strategy=spec.strategy.type,
        topics=topics,
        members=view.members,
        published=current,
        lags=snapshot.lags,
        partition_racks=snapshot.partition_racks,
        max_moves=spec.rebalance.max_moves,
        failback=spec.strategy.failback,
        epoch=previous.epoch or None,
    )
    # Asked for only when the plan can change: a trigger fired, or damping has something to judge
    # (a busy policy's run otherwise skips the strategy, docs/design.md §8.5).
    target = functools.partial(run.memory.targets.target, request)
    before = run.memory.targets.stats(request, held_sets(previous)) if observed is not None else None
    members = frozenset(identity.name for identity in view.members)
    digest = target_inputs_digest(run.body.get("spec"))
    trigger = rebalance_trigger(
        published=current if observed is not None else None,
        published_members=observed.members if observed is not None else None,
        spec_changed=_spec_changed(run, observed, digest),
        members=members,
        topics=topics,
        releasing=previous.releasing,
    )
    run.memory.damping.remember_digest(run.policy.generation, digest)
    damped: Damped | None = None
    if trigger is None and before is not None and not paused:
        damped = _damp(
            run, spec, before=before, target=target, topics=topics, current=current, members=members
        )
        trigger = damped.trigger
    everyone = sorted(view.identities_by_ordinal.values())
    if paused and trigger in (None, Trigger.PARTITIONS_CHANGED, Trigger.HANDOFF):
        trigger = None  # the pause itself changes the plan; lag and balance wait for the reset
        wanted: Mapping[Any, Sequence[TopicPartition]] = current
    else:
        wanted = target().assignment if trigger is not None else current
    entries = {
        identity: tuple(sorted(tp for tp in wanted.get(identity, ()) if tp not in paused))
        if identity in members
        else ()
        for identity in everyone
    }
    moves = moves_between(current, entries, among=members) if observed is not None else 0
    after = run.memory.targets.stats(request, entries)
    label = trigger.value if trigger else None
    if paused and label is None and entries != {i: tuple(sorted(current.get(i, ()))) for i in everyone}:
        label = "OffsetReset"
    keep = Decision(
        target=entries,
        members=members,
        shown=current,
        trigger=label,
        moves=moves,
        max_lag_before=before["max_member_lag"] if before else None,
        max_lag_after=after["max_member_lag"],
        imbalance=before["imbalance"] if before else after["imbalance"],
        damping_quiet_s=0.0 if damped is None else damped.quiet_s,
    )
    if spec.dry_run:
        return replace(keep, target=None, shown=entries, imbalance=after["imbalance"], waiting="DryRun")
    if observed is not None and not paused:
        proposed = _from_pipeline(
            run,
            spec,
            keep,
            request,
            current,
            everyone,
            topics,
            base_epoch=previous.epoch,
            handing_off=bool(previous.releasing),
        )
        if proposed is not None:
            if damped is not None:
                _remember(run, spec, damped, published=False)  # a person's plan uses up no trigger
            return proposed
    if spec.rebalance.approval == "manual" and observed is not None and moves > 0 and not paused:
        decision = _manual(run, spec, keep, entries, base_epoch=previous.epoch)
    else:
        decision = keep
    if damped is not None and damped.trigger is not None and decision.target is not None and moves > 0:
        decision = _within_budget(run, spec, decision)
    if damped is not None:
        _remember(run, spec, damped, published=decision.target is not None)
    return decision


# -- plans from the pipeline (controller/pipeline_plan.py) ---------------------------------------


def _from_pipeline(  # noqa: PLR0917 - one call site
    run: RunContext,
    spec: PolicySpec,
    keep: Decision,
    request: TargetRequest,
    current: Mapping[str, Sequence[TopicPartition]],
    everyone: Sequence[str],
    topics: Mapping[str, int],
    *,
    base_epoch: int,
    handing_off: bool,
) -> Decision | None:
    """With approval manual, the plan `groupops propose` wrote into the policy's annotation, as the
    standing proposal (trigger PipelinePlan) while it moves something; approved, it is the target
    until its handoff is done (`handing_off`: the published plan has partitions releasing), and
    never a budget's to hold (a person chose it, as a spec change). None: no such plan (or it
    cannot be used: a Warning Event says why, once per plan, and the operator plans as usual)."""
    if spec.rebalance.approval != "manual":
        return None
    applied = run.status.get("pipelinePlanApplied")
    plan = pipeline_plan(
        (run.body.get("metadata") or {}).get("annotations"),
        members=keep.members,
        everyone=everyone,
        topics=topics,
        applied=None if handing_off else applied,
    )
    if plan is None:
        return None
    if plan.entries is None:
        if run.memory.pipeline_plan_refused != plan.id:
            run.memory.pipeline_plan_refused = plan.id
            run.event("Warning", "PipelinePlanRefused", str(plan.problem))
        run.log.info("%s", plan.problem)
        return None
    moves = moves_between(current, plan.entries, among=keep.members)
    if plan.id == applied:  # approved and published: the second epoch of its handoff goes there too
        return replace(keep, target=plan.entries, trigger=PIPELINE_TRIGGER, moves=moves)
    if moves == 0:
        return None
    chosen = replace(
        keep,
        trigger=PIPELINE_TRIGGER,
        moves=moves,
        max_lag_after=stats_of(request, plan.entries)["max_member_lag"],
    )
    decision = _manual(run, spec, chosen, plan.entries, base_epoch=base_epoch)
    return replace(decision, pipeline_plan_applied=plan.id) if decision.approved else decision


# -- the cluster's disruption budget (planner/budget.py, controller/clusters.py) ------------------


def _within_budget(run: RunContext, spec: PolicySpec, decision: Decision) -> Decision:
    """A rebalance the policy chose (a damped trigger) runs only when its cluster's disruption
    budget allows it; held, it waits as a proposal does (its trigger stays for the next run) and
    status says why (PlanApplied=False, WaitingForBudget)."""
    clusters, cluster = run.deps.clusters, spec.kafka.cluster_ref
    if clusters is None or cluster is None:
        return decision
    goal = spec.target_time_lag_seconds
    time_lag = run.status.get("timeLagSeconds")
    badness = badness_of(
        decision.imbalance, float(time_lag) if isinstance(time_lag, (int, float)) else None, goal
    )
    verdict = clusters.request(
        cluster, (run.policy.namespace, run.policy.name), moves=decision.moves, badness=badness
    )
    if verdict.granted:
        return replace(decision, budget_granted=True)
    run.deps.metrics.budget_holds.labels(cluster).inc()
    run.log.info("%s held by the disruption budget of %s: %s", decision.trigger, cluster, verdict.reason)
    return replace(decision, target=None, waiting="WaitingForBudget", budget_note=verdict.reason)


# -- damping (planner/damping.py) ---------------------------------------------------------------

_NOT_TARGET_INPUTS: tuple[tuple[str, ...], ...] = (
    ("lagSource", "static", "lags"),
    ("rebalance", "interval"),
    ("rebalance", "imbalanceThreshold"),
    ("rebalance", "minImprovement"),
    ("rebalance", "cooldownSeconds"),
    ("consumers", "autoscale", "behavior"),
    ("targetTimeLagSeconds",),
)
"""Spec fields the target does not depend on: the static source's lags are a lag reading (as a
`kafka` read is), the others say when to replan, not what (the time-lag goal is only reported).
Changing only these is no `SpecChanged`: the lag-driven triggers, damped, judge the new lag."""


def target_inputs_digest(spec: Any) -> str:
    """A digest of the spec without `_NOT_TARGET_INPUTS` (equal digests: the same target)."""
    trimmed = json.loads(json.dumps(spec or {}))
    for *parents, leaf in _NOT_TARGET_INPUTS:
        node = trimmed
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True).encode()).hexdigest()[:16]


def _spec_changed(run: RunContext, observed: ObservedPlan | None, digest: str) -> bool:
    """The plan was made for another generation whose target inputs differ from this one's, or
    that this memory never saw (a restart: counted as changed, the safe side)."""
    if observed is None or observed.generation == run.policy.generation:
        return False
    seen = None if observed.generation is None else run.memory.damping.plan_digests.get(observed.generation)
    return seen != digest


def damping_settings(spec: PolicySpec) -> DampingSettings:
    """spec.rebalance as damping reads it."""
    return DampingSettings(
        # failover puts everything on one replica by design: its imbalance is no reason to move
        imbalance_threshold=(
            math.inf if spec.strategy.type == "failover" else spec.rebalance.imbalance_threshold
        ),
        min_improvement=spec.rebalance.min_improvement,
        cooldown_seconds=spec.rebalance.cooldown_seconds,
        interval_seconds=spec.rebalance.interval_seconds,
    )


def _damp(
    run: RunContext,
    spec: PolicySpec,
    *,
    before: Mapping[str, Any],
    target: Callable[[], Target],
    topics: Mapping[str, int],
    current: Mapping[str, Sequence[TopicPartition]],
    members: frozenset[str],
) -> Damped:
    """`planner.damping.damp` on this run's figures: the published plan's and the target's under
    the lag just read, whether the target evens out counts (never for failover, which puts
    everything on one replica by design), the time since status.lastRebalance. The target is
    computed only if counts are uneven now or damping asks for its figures."""
    uneven = count_shortfall(current, members, topics)
    counts_nearer = (
        spec.strategy.type != "failover"
        and uneven > 0
        and count_shortfall(normalized(target().assignment), members, topics) < uneven
    )
    settings = damping_settings(spec)
    since = seconds_since(run.status.get("lastRebalance"), run.now)

    def after() -> Figures:
        figures = target().stats
        return Figures(imbalance=float(figures["imbalance"]), max_member_lag=float(figures["max_member_lag"]))

    damped = damp(
        state=run.memory.damping.triggers,
        before=Figures(imbalance=float(before["imbalance"]), max_member_lag=float(before["max_member_lag"])),
        after=after,
        counts_nearer=counts_nearer,
        seconds_since_rebalance=since,
        now=run.now.timestamp(),
        settings=settings,
        over_goal=_over_goal(run, spec),
    )
    if damped.trigger is None and damped.candidate is not None and damped.verdict is not None:
        run.log.debug("%s", damped.verdict.describe(damped.candidate, settings, since))
    return damped


def _over_goal(run: RunContext, spec: PolicySpec) -> bool:
    """The group's time lag, as the last run reported it (status.timeLagSeconds: the reader's
    windows, design §4.1), is above spec.targetTimeLagSeconds."""
    goal, time_lag = spec.target_time_lag_seconds, run.status.get("timeLagSeconds")
    return goal is not None and isinstance(time_lag, (int, float)) and time_lag > goal


def _remember(run: RunContext, spec: PolicySpec, damped: Damped, *, published: bool) -> None:
    """Keep the trigger state the decision leads to: a plan that goes to the handoff uses up its
    trigger; a proposal left waiting for approval uses up nothing (it must stand next run)."""
    memory = run.memory.damping
    was_armed = memory.triggers.armed
    memory.triggers = damped.state if published else damped.unpublished
    if published and was_armed and not memory.triggers.armed and damped.trigger is not None:
        run.log.info(
            "%s: the new plan's imbalance stays above %.3f; ImbalanceExceeded waits until it is back "
            "at or below (the interval re-evaluates meanwhile)",
            damped.trigger.value,
            damping_settings(spec).rearm_below,
        )


def autoscaled_replicas(run: RunContext, scale: AutoscaleSpec, total_lag: int) -> int:
    """The replica count of an autoscaled policy for this run: `replicas_for` the lag just read,
    stabilised over the recommendations this memory has seen (`planner.damping.stabilize`,
    spec.consumers.autoscale.behavior). A memory that saw none yet (operator restart, new leader)
    starts from the current count (status.replicas) as if it had been recommended just now."""
    memory = run.memory.damping
    now = run.now.timestamp()
    recommended = scale.replicas_for(total_lag)
    raw = run.status.get("replicas")
    current = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    history = memory.recommendations
    if history is None:
        history = () if current is None else (Recommendation(now, current),)
    stabilized = stabilize(
        recommended=recommended, current=current, history=history, now=now, windows=scale.windows
    )
    memory.recommendations = record(history, Recommendation(now, recommended), scale.windows)
    replicas = max(scale.minimum, min(scale.maximum, stabilized))
    if replicas != recommended:
        run.log.debug(
            "autoscale: the lag asks for %d replicas, %d kept (stabilisation windows up %gs, down %gs)",
            recommended,
            replicas,
            scale.windows.up_seconds,
            scale.windows.down_seconds,
        )
    return replicas


def _manual(
    run: RunContext,
    spec: PolicySpec,
    keep: Decision,
    entries: dict[str, tuple[TopicPartition, ...]],
    *,
    base_epoch: int,
) -> Decision:
    """approval: manual. A standing proposal for the same identities and spec is kept (lag moves
    would otherwise rewrite it every tick); spec.rebalance.approvedProposal naming its id makes it
    the target. Nothing is written to the policy: status.approvedProposal remembers the id, and a
    later proposal has another id (it starts from a later epoch), so an approval left in Git
    approves nothing more."""
    standing = run.status.get("proposal") or {}
    standing_assignment = assignment_from_status(standing.get("assignment"))
    digest = spec_digest(run.body.get("spec"))
    from_pipeline = keep.trigger == PIPELINE_TRIGGER
    if (
        standing_assignment is not None
        and standing.get("id")
        and set(standing_assignment) == set(entries)
        and standing.get("specDigest") == digest
        and (standing.get("trigger") == PIPELINE_TRIGGER) == from_pipeline
        and (not from_pipeline or standing_assignment == entries)
    ):
        proposed = standing_assignment
        proposal = dict(standing)
    else:
        proposed = entries
        proposal = {
            "id": proposal_id(run.policy.uid, base_epoch, entries),
            "baseEpoch": base_epoch,
            "specDigest": digest,
            "trigger": keep.trigger,
            "moves": keep.moves,
            "maxMemberLagBefore": round(float(keep.max_lag_before or 0.0), 3),
            "maxMemberLagAfter": round(float(keep.max_lag_after), 3),
            "createdAt": iso(run.now),
            "assignment": assignment_to_status(entries),
        }
    approved = spec.rebalance.approved_proposal
    if approved is not None and approved == proposal["id"]:
        return replace(keep, target=proposed, approved=True, approved_id=approved)
    note = None
    if approved is not None:
        note = f"spec.rebalance.approvedProposal names {approved}, " + (
            "which was applied already"
            if approved == run.status.get("approvedProposal")
            else "which is not the standing proposal"
        )
    return replace(keep, target=None, proposal=proposal, waiting="AwaitingApproval", approval_note=note)


def proposal_id(policy_uid: str, base_epoch: int, assignment: Mapping[str, Sequence[TopicPartition]]) -> str:
    """The same policy, starting epoch and assignment always get the same id (a standby that
    takes over proposes under the id people already saw); another epoch gets another id."""
    text = json.dumps(
        [policy_uid, base_epoch, assignment_to_status({k: tuple(v) for k, v in assignment.items()})],
        sort_keys=True,
    )
    return "p-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def spec_digest(spec: Any) -> str:
    """The spec as far as a proposal depends on it: everything but the approval itself."""
    trimmed = dict(spec or {})
    rebalance = {k: v for k, v in (trimmed.get("rebalance") or {}).items() if k != "approvedProposal"}
    trimmed["rebalance"] = rebalance
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True).encode()).hexdigest()[:16]


def seconds_since(stamp: Any, now: datetime) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (now - then).total_seconds()


def assignment_to_status(assignment: Mapping[str, tuple[TopicPartition, ...]]) -> dict[str, list[str]]:
    return {identity: [str(tp) for tp in sorted(tps)] for identity, tps in sorted(assignment.items())}


def assignment_from_status(raw: Any) -> dict[str, tuple[TopicPartition, ...]] | None:
    if not isinstance(raw, Mapping):
        return None
    result: dict[str, tuple[TopicPartition, ...]] = {}
    try:
        for identity, items in raw.items():
            parsed = []
            for item in items:
                topic, _, partition = str(item).rpartition("-")  # the partition is the last "-<digits>"
                parsed.append(TopicPartition(topic, int(partition)))
            result[str(identity)] = tuple(sorted(parsed))
    except (TypeError, ValueError):
        return None
    return result
