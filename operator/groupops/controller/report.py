"""Status in one place for a reconcile run: the status object, the conditions' Events, and the
failure report (status kept, conditions set, Event posted, then `ReconcileFailure`).

Status is patched only when an owned field really changed (`status.status_patch`); an Event is
posted when Ready or Degraded changes status or reason, and by the publish step per rebalance.
Time lag and stuck partitions (their fields, metrics and Events) come from `lagstate`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from groupops.controller.context import ReconcileFailure, RunContext, iso
from groupops.controller.decide import Decision
from groupops.controller.heartbeats import HeardProgress
from groupops.controller.identities import IdentityView
from groupops.controller.lagread import Windows
from groupops.controller.lagstate import lag_report
from groupops.controller.names import API_GROUP, API_VERSION, KIND, pod_name
from groupops.controller.native import BrokerAgreement
from groupops.controller.spec import PolicySpec
from groupops.controller.status import Condition, figures_only, merge_conditions, status_patch
from groupops.kubeapi import KubeError
from groupops.lag import LagSnapshot
from groupops.model import TopicPartition
from groupops.planner.wire import lease_name

__all__ = [
    "PROGRESS_SHOWN_AFTER_S",
    "announce_transitions",
    "fail",
    "member_progress",
    "patch_status",
    "progress_shown",
    "write_status",
]


def write_status(
    run: RunContext,
    spec: PolicySpec,
    snapshot: LagSnapshot,
    view: IdentityView,
    decision: Decision,
    *,
    epoch: int,
    replicas: int,
    broker: BrokerAgreement | None = None,
    degraded: tuple[str, str] | None = None,
    offset_reset: Mapping[str, Any] | None = None,
    in_progress: str | None = None,
    windows: Windows | None = None,
) -> bool:
    """`broker`: with delivery native, how Kafka's actual assignment compares with the
    prediction; it decides PlanApplied (the replicas follow Kafka, not the plan). `degraded`:
    the reason and message when the run planned without fresh lag (Degraded=True).
    `offset_reset`: status.offsetReset when this run changed it (None: kept). `in_progress`: what
    the operator still works toward on its own (Reconciling=True), None when it is done.
    `windows`: the time-lag windows of the snapshot (`lagstate`: time lag, stuck partitions)."""
    lag_of = {tp: snapshot.lags[tp.topic][tp.partition] for tp in all_partitions(snapshot)}
    shown = decision.shown
    behind = lag_report(run, spec, snapshot=snapshot, view=view, shown=shown, windows=windows)
    members = []
    book = run.deps.heartbeats
    previous_errors = {
        str(m.get("instanceId")): dict(m.get("errors") or {}) for m in run.status.get("members") or []
    }
    stopped: list[str] = []
    lag_by_identity: dict[str, int] = {}
    priorities = {identity.name: identity.priority for identity in view.members}
    capacities = {identity.name: identity.capacity for identity in view.members}
    for ordinal in sorted(view.identities_by_ordinal):
        identity = view.identities_by_ordinal[ordinal]
        partitions = sorted(shown.get(identity, ()))
        lag = sum(lag_of.get(tp, 0) for tp in partitions)
        lag_by_identity[identity] = lag
        zone = next((z for i, _, z in view.slots if i == ordinal), None)
        entry: dict[str, Any] = {
            "instanceId": identity,
            "pod": pod_name(run.policy.name, ordinal),
            "priority": priorities.get(identity, spec.consumers.priorities.get(identity, -(ordinal + 1))),
            "capacity": capacities.get(identity, spec.consumers.capacity.of(identity, zone)),
            "state": member_state(view, ordinal, identity, bool(partitions)),
            "partitions": [str(tp) for tp in partitions],
            "lag": lag,
        }
        if identity in behind.member_time_lag_s:
            entry["timeLagSeconds"] = behind.member_time_lag_s[identity]
        if zone:
            entry["zone"] = zone
        lease = view.leases.get(identity)
        if lease is not None and lease.errors:
            entry["errors"] = dict(lease.errors)
            _announce_errors(run, identity, dict(lease.errors), previous_errors.get(identity, {}))
        heard = (
            None
            if book is None
            else book.progress_of(run.policy.namespace, lease_name(run.policy.name, identity))
        )
        if heard is not None and progress_shown(heard):
            entry["progress"] = member_progress(heard)
        if lease is not None and lease.live and lease.stopped:
            entry["stopped"] = [f"{tp}@{offset}" for tp, offset in lease.stopped]
            stopped.extend(f"{tp}@{offset} on {identity}" for tp, offset in lease.stopped)
        members.append(entry)
    degraded = _with_stopped(_with_no_lag_series(degraded, snapshot), stopped)
    last = run.status.get("lastRebalance")
    if decision.published and not spec.dry_run:
        last = iso(run.now)
    waiting = decision.waiting
    conditions = [
        Condition(
            "Ready",
            True,
            "DryRun" if spec.dry_run else "Reconciled",
            "dry run: the plan is computed and reported, never applied"
            if spec.dry_run
            else f"plan epoch {epoch} published for {replicas} replicas",
        ),
        Condition(
            "PlanApplied",
            waiting is None,
            waiting or "Published",
            {
                "DryRun": "dry run: nothing is applied",
                "AwaitingApproval": awaiting_approval_message(decision.proposal, decision.approval_note),
                "WaitingForBudget": f"a {decision.trigger} rebalance of {decision.moves} moves waits for the "
                f"disruption budget of ConsumerGroupCluster {spec.kafka.cluster_ref}: {decision.budget_note}",
            }.get(waiting or "", f"consumers follow epoch {epoch}"),
        )
        if broker is None or waiting is not None
        else Condition(
            "PlanApplied",
            broker.matches is True,
            {True: "BrokerMatches", False: "BrokerDiffers", None: "BrokerNotCompared"}[broker.matches],
            broker.message,
        ),
        Condition("Degraded", False, "AsExpected", "")
        if degraded is None
        else Condition("Degraded", True, degraded[0], degraded[1]),
        Condition("Reconciling", False, "Reconciled", "")
        if in_progress is None
        else Condition("Reconciling", True, "Progressing", in_progress),
        Condition("Stalled", False, "AsExpected", ""),
    ]
    merged = merge_conditions(
        run.status.get("conditions"), conditions, generation=run.policy.generation, now=iso(run.now)
    )
    desired = {
        "observedGeneration": run.policy.generation,
        "conditions": merged,
        "strategy": spec.strategy.type,
        "epoch": epoch,
        "replicas": replicas,
        "readyReplicas": view.ready,
        "members": members,
        "totalLag": snapshot.total(),
        "maxMemberLag": round(float(max(lag_by_identity.values(), default=0)), 3),
        "imbalance": round(float(decision.imbalance), 3),
        "lastRebalance": last,
        "proposal": decision.proposal,
        "approvedProposal": decision.approved_id or run.status.get("approvedProposal"),
        "pipelinePlanApplied": decision.pipeline_plan_applied or run.status.get("pipelinePlanApplied"),
        "brokerAssignment": None if broker is None else broker.to_status(),
        "offsetReset": run.status.get("offsetReset") if offset_reset is None else dict(offset_reset),
        **behind.status,
    }
    metrics = run.deps.metrics
    metrics.record_members(run.policy.namespace, run.policy.name, lag_by_identity)
    metrics.total_lag.labels(run.policy.namespace, run.policy.name).set(snapshot.total())
    metrics.imbalance.labels(run.policy.namespace, run.policy.name).set(decision.imbalance)
    metrics.epoch.labels(run.policy.namespace, run.policy.name).set(epoch)
    if broker is not None and broker.matches is not None:
        metrics.broker_matches.labels(run.policy.namespace, run.policy.name).set(int(broker.matches))
    announce_transitions(run, merged)
    if run.deps.clusters is not None and spec.kafka.cluster_ref is not None:
        run.deps.clusters.note_figures(
            (run.policy.namespace, run.policy.name), group_id=spec.group_id, status=desired
        )
    return _write_paced(run, desired)


def _write_paced(run: RunContext, desired: Mapping[str, Any]) -> bool:
    """Write `desired`, unless it moves lag figures only and status was written less than
    `status_figures_seconds` ago: those wait for the next write, at the latest that long after
    the last (`memory.figures_due`, which a settled run's check honours). docs/design.md §8.3,
    "a figures-only status change waits"."""
    memory = run.memory
    patch = status_patch(run.status, desired)
    if patch is None:
        memory.figures_due = None
        return False
    now = time.monotonic()
    every = run.deps.settings.reconcile.status_figures_seconds
    last = memory.status_written_at
    if last is not None and now - last < every and figures_only(run.status, desired):
        memory.figures_due = last + every
        run.deps.metrics.status_figures_held.labels(run.policy.namespace, run.policy.name).inc()
        return False
    _send_status(run, patch)
    memory.status_written_at = now
    memory.figures_due = None
    return True


_PROGRESS_FIELDS = {
    "poll": "sinceLastPollSeconds",
    "advance": "sinceProgressSeconds",
    "commit": "sinceLastCommitSeconds",
}
"""Heartbeat progress keys (planner/liveness.py) -> the member's status fields."""


PROGRESS_SHOWN_AFTER_S = 10.0
"""A member's progress is in status only while its last poll or its last advance under lag is at
least this old: a healthy replica's values change with every heartbeat, and showing them would
make every reconcile write status (design §8.3: writes only when something changed). The live
values are always in the metric `groupops_member_seconds_since_poll`."""


def progress_shown(heard: HeardProgress) -> bool:
    return any(heard.progress.get(key, 0.0) >= PROGRESS_SHOWN_AFTER_S for key in ("poll", "advance"))


def member_progress(heard: HeardProgress) -> dict[str, Any]:
    """status.members[].progress: the seconds-since values the replica's last heartbeat
    reported, in whole seconds, and when the operator heard it (the values are as of then)."""
    shown: dict[str, Any] = {
        field: round(float(heard.progress[key]))
        for key, field in _PROGRESS_FIELDS.items()
        if key in heard.progress
    }
    shown["heardAt"] = iso(datetime.fromtimestamp(heard.heard_at, tz=UTC))
    return shown


_ERROR_EVENTS = {
    "uncommittedReleases": (
        "ReleaseUncommitted",
        "released partitions without committing (the next owner processes their last messages again)",
    ),
    "deadLettered": (
        "MessagesDeadLettered",
        "wrote messages its callback kept failing on to the dead-letter topic",
    ),
    "skipped": ("MessagesSkipped", "skipped messages its callback kept failing on"),
}


def _announce_errors(
    run: RunContext, identity: str, now: Mapping[str, int], before: Mapping[str, Any]
) -> None:
    """A Warning Event when a replica's count grew since the status last showed it."""
    for kind, (reason, what) in _ERROR_EVENTS.items():
        was = int(before.get(kind, 0) or 0)
        grown = now.get(kind, 0) - (was if now.get(kind, 0) >= was else 0)  # a restart counts from 0
        if grown > 0:
            run.event(
                "Warning",
                reason,
                f"{identity} {what}: {grown} more ({now[kind]} since it started); see its log",
            )


def _with_no_lag_series(degraded: tuple[str, str] | None, snapshot: LagSnapshot) -> tuple[str, str] | None:
    """Degraded=True with reason NoLagSeries while the lag source has no series at all for some
    topics (`prometheus`, `burrow`: an exporter reports a group once it has committed, so a new
    group has none until its replicas start): those topics are planned with lag 0 on Kafka's
    partition counts, and the replicas start. Cleared by the first read with series for every
    topic (or added to another reason's message)."""
    topics = snapshot.topics_without_series
    if not topics:
        return degraded
    one = len(topics) == 1
    note = (
        f"the lag source has no lag series for {'topic' if one else 'topics'} {', '.join(topics)} of "
        f"group {snapshot.group_id} (exporters report a group once it commits): "
        f"{'it is' if one else 'they are'} planned with lag 0 on Kafka's partition counts"
    )
    if degraded is None:
        return "NoLagSeries", note
    return degraded[0], f"{degraded[1]}; {note}"


def _with_stopped(degraded: tuple[str, str] | None, stopped: list[str]) -> tuple[str, str] | None:
    """Degraded=True with reason PartitionsStopped while replicas report partitions stopped on a
    message their callback keeps failing on (or those added to another reason's message)."""
    if not stopped:
        return degraded
    note = (
        f"stopped on a message the processing callback keeps failing on: {', '.join(stopped)} "
        "(consumers.onError; the replica's log says why; a fixed release rolls the pods)"
    )
    if degraded is None:
        return "PartitionsStopped", note
    return degraded[0], f"{degraded[1]}; {note}"


def member_state(view: IdentityView, ordinal: int, identity: str, has_partitions: bool) -> str:
    if identity in view.draining:
        return "Draining"
    lease = view.leases.get(identity)
    if lease is not None and lease.expired:
        return "Expired"
    pod = view.pods.get(ordinal)
    if pod is None or pod.terminating or not pod.ready:
        return "Pending"
    return "Active" if has_partitions else "Standby"


def all_partitions(snapshot: LagSnapshot) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic, lags in snapshot.lags.items() for p in range(len(lags))]


def announce_transitions(run: RunContext, conditions: list[dict[str, Any]]) -> None:
    """An Event when Ready or Degraded changes status or reason (a steady state posts nothing)."""
    before = {c.get("type"): c for c in run.status.get("conditions") or []}
    for condition in conditions:
        if condition["type"] == "PlanApplied":
            continue
        old = before.get(condition["type"])
        if old is not None and (old.get("status"), old.get("reason")) == (
            condition["status"],
            condition["reason"],
        ):
            continue
        if old is None and condition["type"] == "Degraded" and condition["status"] == "False":
            continue
        bad = (condition["type"] == "Ready") == (condition["status"] == "False")
        run.event(
            "Warning" if bad else "Normal", condition["reason"], condition["message"] or condition["type"]
        )


def patch_status(run: RunContext, desired: Mapping[str, Any]) -> bool:
    patch = status_patch(run.status, desired)
    if patch is None:
        return False
    _send_status(run, patch)
    return True


def _send_status(run: RunContext, patch: Mapping[str, Any]) -> None:
    try:
        written = run.deps.client.patch(
            f"{API_GROUP}/{API_VERSION}",
            KIND,
            run.policy.namespace,
            run.policy.name,
            {"status": patch},
            subresource="status",
        )
    except KubeError as e:
        raise ReconcileFailure("StatusWriteFailed", str(e), transient=True) from e
    read = run.body.get("metadata") or {}
    answer = (written or {}).get("metadata") or {}
    unchanged = all(read.get(key) == answer.get(key) for key in ("generation", "labels", "annotations"))
    if unchanged and (written or {}).get("spec") == run.body.get("spec") and answer.get("resourceVersion"):
        run.memory.own_status_write = (str(read.get("resourceVersion")), str(answer["resourceVersion"]))
    else:
        run.memory.own_status_write = None


def awaiting_approval_message(proposal: Mapping[str, Any] | None, note: str | None) -> str:
    """What a person must do to apply the standing proposal (and why a stale approval did not)."""
    ident = (proposal or {}).get("id", "")
    text = (
        f"proposal {ident} waits for approval: set spec.rebalance.approvedProposal: {ident} "
        f"(or run `groupops approve POLICY --proposal {ident}`)"
    )
    return f"{text}; {note}" if note else text


def fail(
    run: RunContext,
    reason: str,
    message: str,
    *,
    transient: bool,
    degraded: bool = False,
    cleared: Collection[str] = (),
) -> NoReturn:
    """Report a failure in status (keeping every figure of the last good run but those `cleared`:
    a policy standing down for another, conflicts.py, runs nothing) and raise."""
    run.log.warning("%s: %s", reason, message)
    status = run.status
    if degraded:
        conditions = [
            Condition(
                "Ready", True, "LastPlanRunning", f"the last good plan (epoch {status.get('epoch', 0)}) runs"
            ),
            Condition("PlanApplied", False, reason, message),
            Condition("Degraded", True, reason, message),
        ]
    else:
        conditions = [
            Condition("Ready", False, reason, message),
            Condition("PlanApplied", False, reason, message),
            Condition("Degraded", False, "AsExpected", ""),
        ]
    # kstatus: a failure the operator retries is progress still to come; any other waits for a person.
    if transient:
        conditions += [
            Condition("Reconciling", True, reason, message),
            Condition("Stalled", False, "AsExpected"),
        ]
    else:
        conditions += [
            Condition("Reconciling", False, "Stalled"),
            Condition("Stalled", True, reason, message),
        ]
    desired = {key: status.get(key) for key in status if key not in cleared}
    desired["observedGeneration"] = run.policy.generation
    merged = merge_conditions(
        status.get("conditions"), conditions, generation=run.policy.generation, now=iso(run.now)
    )
    desired["conditions"] = merged
    desired.setdefault("strategy", (run.body.get("spec") or {}).get("strategy", {}).get("type"))
    announce_transitions(run, merged)
    try:
        patch_status(run, desired)
    except ReconcileFailure:
        run.log.warning("could not write the failure to status either")
    raise ReconcileFailure(reason, message, transient=transient)
