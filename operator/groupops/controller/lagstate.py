"""Time lag and stuck partitions in one reconcile: status, metrics, Events, and the STALL handoff.

Stage: the reconcile's lag step hands on the policy's windows (`lagread.LagTake.windows`,
`planner.lagwindow`: only a `kafka` lag source reads offsets); after the plan decision
`hand_off_stalled` may move stalled partitions; `write_status` (report.py) takes `LagReport`.

What it reports (docs/design.md §4, docs/operations.md):
- status.timeLagSeconds: the group's time lag, the largest of its partitions' (the pipeline's
  `timelag_by_group` max); status.members[].timeLagSeconds: the largest of the member's
  partitions'; status.timeLagGoal: spec.targetTimeLagSeconds and whether the group meets it;
- status.stuckPartitions: partitions judged STALL, STOP or REWIND (`planner.stuck`), worst first,
  at most `STUCK_LISTED` of them, each with its owner (identity, "" for none);
- metrics: groupops_time_lag_seconds, groupops_time_lag_goal_seconds,
  groupops_member_time_lag_seconds and groupops_partition_status (partitions per state: one
  series per state, not per partition);
- Events, Warning, once per transition into a state (announced states are remembered in the
  policy's memory, seeded from status so that a new leader does not repeat them):
  `PartitionStalled`, `GroupStopped`, `OffsetRewound`, one Event per reason and run.

Who owns a partition and whether it is live: with delivery plan, its identity in the published
plan (a partition in nobody's set, being released, the replica whose Lease still reports it) and
that identity's Lease (`LeaseState.live`); with delivery native, the member Kafka's group reports
owning it (a member is live by being in the group).

The STALL handoff (`hand_off_stalled`): a partition that is STALL on a live member is handed to
another live member, a standby if one holds nothing, else swapped with that member's partition
closest to it in lag (the counts stay as the strategy made them); a rebalance with trigger
`PartitionStalled` when nothing else replans this run. Once per standstill: while it lasts, every
later target is corrected the same way (the strategies know nothing of it, and `lag` would hand
it straight back), and if it stays stalled under its new owner it is reported, not moved again
(the fault is then likely its messages, not the replica). It ends with the standstill; the
strategy then places the partition freely. A partition its live replica stopped on a failing
message (consumers.onError, reported in its Lease) is handed away the same way at once, without
waiting for the window: the replica's report is the evidence. If the next replica stops on it
too, the message is poison and it stays there, PartitionsStopped (design §9.2). Only with
approval auto, delivery plan, a strategy other than failover (one active replica by design),
a `kafka` lag source (the standstill is what keeps it away) and no offset reset pausing
partitions. STOP is reported and never replanned: nobody live owns the partition, which the
membership triggers answer when a replica comes back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from groupops.controller.context import RunContext
from groupops.controller.decide import Decision
from groupops.controller.identities import IdentityView
from groupops.controller.lagread import Windows
from groupops.controller.publish import moves_between
from groupops.controller.spec import PolicySpec
from groupops.lag import LagSnapshot
from groupops.model import TopicPartition
from groupops.planner.stuck import STUCK_STATES, PartitionState, judge
from groupops.planner.target import TargetRequest, stats_of

__all__ = [
    "STALL_TRIGGER",
    "STUCK_LISTED",
    "LagReport",
    "LagState",
    "StuckPartition",
    "hand_off_stalled",
    "judged_again",
    "kept_away",
    "lag_report",
    "lag_state",
    "ownership",
    "record_lag_state",
]

STUCK_LISTED = 100
"""The most stuck partitions status lists (worst first); the metric counts them all."""

STALL_TRIGGER = "PartitionStalled"
"""The trigger of a rebalance that hands stalled partitions away (the rebalance metric's label)."""

_EVENTS = {
    PartitionState.STALL: "PartitionStalled",
    PartitionState.STOP: "GroupStopped",
    PartitionState.REWIND: "OffsetRewound",
}
_NAMED_IN_EVENT = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckPartition:
    tp: TopicPartition
    state: PartitionState
    identity: str
    """Its owner ("" when nobody owns it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagState:
    """What the windows say of a group, with its owners: every partition's time lag and state."""

    time_lag_s: Mapping[TopicPartition, float]
    states: Mapping[TopicPartition, PartitionState]
    stuck: tuple[StuckPartition, ...]
    """The partitions not OK, worst first (`STUCK_STATES`), then by partition."""
    window_s: float

    @property
    def group_time_lag_s(self) -> float:
        return max(self.time_lag_s.values(), default=0.0)

    def member_time_lag_s(self, partitions: Iterable[TopicPartition]) -> float:
        return max((self.time_lag_s.get(tp, 0.0) for tp in partitions), default=0.0)

    def counts(self) -> dict[PartitionState, int]:
        found = dict.fromkeys(PartitionState, 0)
        for state in self.states.values():
            found[state] += 1
        return found


def lag_state(
    windows: Windows,
    *,
    owners: Mapping[TopicPartition, str],
    live: Collection[str],
    window_s: float,
    carried: Mapping[TopicPartition, PartitionState] | None = None,
) -> LagState:
    """Judge every partition of `windows` (pure). `owners`: partition -> identity; `live`: the
    identities that are live; `carried`: states status listed, kept for a partition judged OK
    while its reads do not reach back a whole window yet (a new leader, or one restarted, does
    not clear and then announce again what the last one reported)."""
    states = {
        tp: judge(window.commits, window_s=window_s, owner_live=owners.get(tp, "") in live)
        for tp, window in windows.items()
    }
    for tp, state in (carried or {}).items():
        if states.get(tp) is PartitionState.OK and not windows[tp].commits.covers(window_s):
            states[tp] = state
    severity = {state: rank for rank, state in enumerate(STUCK_STATES)}
    stuck = sorted(
        (
            StuckPartition(tp=tp, state=state, identity=owners.get(tp, ""))
            for tp, state in states.items()
            if state is not PartitionState.OK
        ),
        key=lambda s: (severity[s.state], s.tp),
    )
    return LagState(
        time_lag_s={tp: window.time_lag_s for tp, window in windows.items()},
        states=states,
        stuck=tuple(stuck),
        window_s=window_s,
    )


def ownership(
    spec: PolicySpec,
    view: IdentityView,
    assignment: Mapping[str, Sequence[TopicPartition]],
    snapshot: LagSnapshot,
) -> tuple[dict[TopicPartition, str], frozenset[str]]:
    """Who owns each partition and which owners are live (the module docstring)."""
    if spec.consumers.delivery == "native" and snapshot.assignment is not None:
        return snapshot.assignment.owners(), frozenset(snapshot.assignment.members)
    live = frozenset(identity for identity, lease in view.leases.items() if lease.live)
    holding = {  # a partition in nobody's set is still held while its last owner releases it
        tp: identity
        for identity, lease in sorted(view.leases.items(), key=lambda item: item[0] in live)
        for tp in lease.note.partitions
    }
    owners = {tp: identity for identity, tps in assignment.items() for tp in tps}
    return {**holding, **owners}, live


def window_of(spec: PolicySpec) -> float:
    """How long a partition's position must stand still under lag to be stuck (`planner.stuck`):
    consumers.maxPollIntervalSeconds, the patience a whole replica gets from its watchdog."""
    return float(spec.consumers.max_poll_interval_seconds)


# -- the STALL handoff ---------------------------------------------------------------------------


def moves_stalled(spec: PolicySpec) -> bool:
    """Whether this policy hands stalled partitions away at all (the module docstring)."""
    return (
        not spec.dry_run
        and spec.rebalance.approval == "auto"
        and spec.consumers.delivery == "plan"
        and spec.strategy.type != "failover"
    )


def hand_off_stalled(  # noqa: PLR0917 - one call site, the reconcile's plan step
    run: RunContext,
    spec: PolicySpec,
    snapshot: LagSnapshot,
    windows: Windows | None,
    view: IdentityView,
    decision: Decision,
    *,
    paused: Collection[TopicPartition] = (),
) -> Decision:
    """The decision with every stalled partition kept away from the replica it stalled on (the
    module docstring). A partition newly STALL on a live member is handed away once per
    standstill; while that standstill lasts, every target (whatever the strategy, which knows
    nothing of it) is corrected the same way, so the next replan does not hand it back."""
    memory = run.memory
    if windows is None or not moves_stalled(spec) or paused or decision.waiting is not None:
        return decision
    current = {identity: tuple(tps) for identity, tps in decision.shown.items()}
    owners, live = ownership(spec, view, current, snapshot)
    state = lag_state(windows, owners=owners, live=live, window_s=window_of(spec))
    standstill = {tp: w.commits.still_since for tp, w in windows.items() if w.commits.still_since is not None}
    for tp in [tp for tp, (since, _) in memory.stall_handoffs.items() if standstill.get(tp) != since]:
        del memory.stall_handoffs[tp]  # that standstill ended: the strategy decides freely again
    stopped_on = {tp: identity for identity, lease in view.leases.items() for tp, _ in lease.stopped}
    stuck_on = {s.tp: s.identity for s in state.stuck if s.state is PartitionState.STALL}
    # A stop counts while its replica is live and the plan still gives it the partition: the
    # report of one that already released it may outlive the release for a renewal.
    stuck_on.update((tp, who) for tp, who in stopped_on.items() if who in live and owners.get(tp) == who)
    for tp, identity in stuck_on.items():  # STALL implies a standstill (`planner.stuck.judge`)
        if identity in decision.members and tp in standstill and tp not in memory.stall_handoffs:
            memory.stall_handoffs[tp] = (standstill[tp], identity)
    receivers = decision.members & live
    if not memory.stall_handoffs or len(receivers) < 2:
        return decision
    base = decision.target if decision.target is not None else current
    lag_of = {tp: window.lag for tp, window in windows.items()}
    unmoved = set(stopped_on) | {s.tp for s in state.stuck}  # never swapped in: stuck themselves
    target, moved = kept_away(base, memory.stall_handoffs, receivers, lag_of, unmoved=unmoved)
    if not moved:
        return decision
    request = TargetRequest(
        strategy=spec.strategy.type,
        topics={topic: len(lags) for topic, lags in snapshot.lags.items()},
        members=view.members,
        published=current,
        lags=snapshot.lags,
    )
    run.log.info("keeping stalled partitions away from the replicas they stalled on: %s", ", ".join(moved))
    return replace(
        decision,
        target=target,
        trigger=decision.trigger or STALL_TRIGGER,
        moves=moves_between(current, target, among=decision.members),
        max_lag_after=stats_of(request, target)["max_member_lag"],
    )


def kept_away(
    base: Mapping[str, Sequence[TopicPartition]],
    away: Mapping[TopicPartition, tuple[float, str]],
    receivers: Collection[str],
    lag_of: Mapping[TopicPartition, int],
    *,
    unmoved: Collection[TopicPartition] = (),
) -> tuple[dict[str, tuple[TopicPartition, ...]], list[str]]:
    """`base` with each partition of `away` that sits on the identity it must keep away from
    given to another receiver: one that holds nothing if there is one (a standby), else swapped
    with the receiver's partition closest to it in lag (never one of `unmoved`), so that the
    counts stay as the strategy made them (ties: the receiver with the least lag, then by name
    and partition). Pure."""
    entries = {identity: list(tps) for identity, tps in base.items()}
    for identity in receivers:
        entries.setdefault(identity, [])
    moved: list[str] = []
    for tp, (_, stalled_on) in sorted(away.items(), key=lambda item: (-lag_of.get(item[0], 0), item[0])):
        if tp not in entries.get(stalled_on, []):
            continue
        lag = lag_of.get(tp, 0)
        candidates: list[tuple[tuple[int, int, int, str, TopicPartition], str, TopicPartition | None]] = []
        for receiver in receivers:
            if receiver == stalled_on:
                continue
            load = sum(lag_of.get(x, 0) for x in entries[receiver])
            if not entries[receiver]:
                candidates.append(((0, 0, load, receiver, tp), receiver, None))
            for theirs in entries[receiver]:
                if theirs not in away and theirs not in unmoved:
                    rank = (1, abs(lag_of.get(theirs, 0) - lag), load, receiver, theirs)
                    candidates.append((rank, receiver, theirs))
        if not candidates:
            continue
        _, receiver, other = min(candidates, key=lambda candidate: candidate[0])
        entries[stalled_on].remove(tp)
        entries[receiver].append(tp)
        if other is not None:
            entries[receiver].remove(other)
            entries[stalled_on].append(other)
        moved.append(f"{tp} {stalled_on}->{receiver}" + (f" (for {other})" if other else ""))
    return {identity: tuple(sorted(tps)) for identity, tps in entries.items()}, moved


# -- status, metrics, Events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LagReport:
    """What `write_status` adds: status fields (None: removed) and each member's time lag."""

    status: Mapping[str, Any]
    member_time_lag_s: Mapping[str, float]


def lag_report(
    run: RunContext,
    spec: PolicySpec,
    *,
    snapshot: LagSnapshot,
    view: IdentityView,
    shown: Mapping[str, Sequence[TopicPartition]],
    windows: Windows | None,
) -> LagReport:
    """Status fields, metrics and Events of the run's time lag and stuck partitions (the module
    docstring). Without windows (a source without offsets, or no read yet) time lag is unknown:
    the fields and series are removed, the goal is shown without `met`."""
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    goal = spec.target_time_lag_seconds
    metrics.record_time_lag_goal(ns, name, goal)
    if windows is None:
        metrics.record_time_lag(ns, name, None, {})
        metrics.record_partition_states(ns, name, None)
        return LagReport(
            status={
                "timeLagSeconds": None,
                "timeLagGoal": None if goal is None else {"targetSeconds": goal},
                "stuckPartitions": None,
            },
            member_time_lag_s={},
        )
    owners, live = ownership(spec, view, shown, snapshot)
    listed = _listed(run.status)
    state = lag_state(windows, owners=owners, live=live, window_s=window_of(spec), carried=listed)
    members = {identity: shown.get(identity, ()) for identity in view.identities_by_ordinal.values()}
    group, member_time_lag = record_lag_state(run, state, members)
    _announce(run, spec, state, before=listed)
    stuck = [
        {"topic": s.tp.topic, "partition": s.tp.partition, "state": s.state.value, "identity": s.identity}
        for s in state.stuck[:STUCK_LISTED]
    ]
    return LagReport(
        status={
            "timeLagSeconds": group,
            "timeLagGoal": None if goal is None else {"targetSeconds": goal, "met": group <= goal},
            "stuckPartitions": stuck or None,
        },
        member_time_lag_s={identity: lag for identity, lag in member_time_lag.items() if shown.get(identity)},
    )


def record_lag_state(
    run: RunContext, state: LagState, members: Mapping[str, Sequence[TopicPartition]]
) -> tuple[float, dict[str, float]]:
    """Set the time-lag and partition-state gauges from `state`; `members`: every identity with
    its partitions. Returns the group's time lag and each member's, as status shows them."""
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    member_time_lag = {
        identity: round(state.member_time_lag_s(partitions), 1) for identity, partitions in members.items()
    }
    group = round(state.group_time_lag_s, 1)
    metrics.record_time_lag(ns, name, group, member_time_lag)
    metrics.record_partition_states(ns, name, {s.value: n for s, n in state.counts().items()})
    return group, member_time_lag


def judged_again(
    windows: Windows,
    spec: PolicySpec,
    *,
    owners: Mapping[TopicPartition, str],
    live: Collection[str],
    status: Mapping[str, Any],
) -> LagState:
    """`lag_state` as a full run judges it, for a settled policy's check: the owners and the live
    identities its last full run saw, the states its status lists carried."""
    return lag_state(windows, owners=owners, live=live, window_s=window_of(spec), carried=_listed(status))


def _listed(status: Mapping[str, Any]) -> dict[TopicPartition, PartitionState]:
    """status.stuckPartitions as the last run wrote it."""
    listed: dict[TopicPartition, PartitionState] = {}
    for entry in status.get("stuckPartitions") or []:
        try:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            listed[tp] = PartitionState(entry["state"])
        except (KeyError, TypeError, ValueError):
            continue  # not written by this version: judged afresh
    return listed


def _announce(
    run: RunContext, spec: PolicySpec, state: LagState, *, before: Mapping[TopicPartition, PartitionState]
) -> None:
    """One Warning per reason for the partitions that entered a stuck state since the last
    announcement (on this operator's first judgement: since status listed them, `before`)."""
    memory = run.memory
    announced = memory.stuck_announced
    if announced is None:
        announced = {tp: s.value for tp, s in before.items()}
    for kind, reason in _EVENTS.items():
        entered = [s for s in state.stuck if s.state is kind and announced.get(s.tp) != kind.value]
        if entered:
            run.event("Warning", reason, _message(kind, entered, state.window_s, spec))
    memory.stuck_announced = {s.tp: s.state.value for s in state.stuck}


def _message(
    kind: PartitionState, entered: Sequence[StuckPartition], window_s: float, spec: PolicySpec
) -> str:
    named = ", ".join(
        f"{s.tp} ({s.identity})" if s.identity else str(s.tp) for s in entered[:_NAMED_IN_EVENT]
    )
    if len(entered) > _NAMED_IN_EVENT:
        named += f" and {len(entered) - _NAMED_IN_EVENT} more"
    if kind is PartitionState.REWIND:
        return f"the committed offset went back on {named} (status.stuckPartitions)"
    still = f"the committed offset has not moved for {window_s:g} s or more while there is lag"
    if kind is PartitionState.STOP:
        return f"nobody commits on {named}: {still} and no live replica owns them (reported, not replanned)"
    handoff = (
        "each is handed to another live replica once per stall (not one its replica stopped on a "
        "failing message, nor while no other replica is live)"
        if moves_stalled(spec)
        else "not moved (dry run, manual approval, native delivery or failover)"
    )
    return f"stalled on their live owners: {named}: {still}; {handoff}"
