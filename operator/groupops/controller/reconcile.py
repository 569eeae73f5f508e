"""One level-based reconcile of one policy: observe, plan, apply in named steps, report.

Called by every kopf handler (create, update, resume, timer); the handlers only translate the
outcome. Steps, in order (each step hands "desired or none" to `apply.apply`):

    spec          parse and validate (bad spec: Ready=False InvalidSpec + Event, nothing touched)
    conflicts     a later policy on another's group and cluster stands down (`conflicts`)
    observe       plan ConfigMap, pods, Leases, the auth Secret (from the watch caches, `cache`)
    lag           read the policy's lag source (down: Degraded, the last plan stays)
    identities    slots, liveness, draining, members (`identities.identity_view`)
    plan          target (planner) -> trigger? -> handoff step -> manual approval / dry run
    account       ServiceAccount, Role, RoleBinding of the consumers
    leases        one Lease per identity
    publish       plan ConfigMap `<policy>-plan` with the next epoch (only when the plan changed)
    pods          create missing pods; delete drained ones (scale-down, template rollout)
    status        conditions and figures, patched only when they changed; an Event per rebalance;
                  time lag and stuck partitions (`lagstate`; a STALL hands its partition away
                  after the plan step when nothing else replans)

Failures end the run with `ReconcileFailure` after status and Event are written: `transient` ones
are retried by the handler with backoff, the others wait for the spec to change.
Epochs never go back: the next epoch is 1 + the highest of the ConfigMap's and status' epochs, and
the ConfigMap is replaced only with the resourceVersion it was read at.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from groupops.controller import offset_reset, render_pods, render_rbac
from groupops.controller.apply import apply
from groupops.controller.cache import json_copy
from groupops.controller.cache_store import Selector
from groupops.controller.cluster_spec import with_policy_defaults
from groupops.controller.clusters import ClusterRefusal
from groupops.controller.conflicts import stand_down_if_later
from groupops.controller.context import (
    Deps,
    PolicyLog,
    PolicyMemory,
    ReconcileFailure,
    ReconcileResult,
    RunContext,
)
from groupops.controller.decide import Decision, autoscaled_replicas, decide
from groupops.controller.guard import GuardError
from groupops.controller.identities import IdentityView, identity_view, pod_ordinals
from groupops.controller.kafkaguard import (
    check_bootstrap_servers,
    check_kafka_properties,
    check_lag_source_url,
)
from groupops.controller.lagaccess import with_policy_access
from groupops.controller.lagread import LagTake, Windows, counts_from_plan, zero_lag
from groupops.controller.lagstate import LagState, hand_off_stalled, judged_again, ownership, record_lag_state
from groupops.controller.lease_records import LEASE_RECORDS
from groupops.controller.names import (
    API_GROUP,
    API_VERSION,
    KIND,
    identity_name,
    lease_name,
    owned_selector,
    plan_configmap_name,
    pod_name,
    shared_account_name,
)
from groupops.controller.native import BrokerAgreement, compare_with_broker, read_broker_agreement
from groupops.controller.podguard import check_pod_template
from groupops.controller.publish import Fence, floor_plan, handed_over, member_states, normalized, step
from groupops.controller.render_common import PolicyRef
from groupops.controller.render_plan import (
    ObservedPlan,
    configmap_epoch,
    configmap_term,
    read_plan_configmap,
    render_plan_configmap,
)
from groupops.controller.report import fail, progress_shown, write_status
from groupops.controller.settled import (
    CountSettled,
    Settled,
    StuckShape,
    comparable,
    plans_on_counts,
    shape_of,
    unsettled_reason,
)
from groupops.controller.spec import PolicySpec, SpecError, parse_policy
from groupops.kubeapi import Conflict, Forbidden, KubeError, NotFound, Rejected
from groupops.lag import (
    LagAuthorizationError,
    LagError,
    LagSnapshot,
    LagSource,
    LagSourceConfigError,
    LagSourceUnavailable,
    UnknownTopicError,
)
from groupops.lag import kafka as kafka_lag
from groupops.lag.history import PlannedOwners
from groupops.lag.registry import FIXED_SOURCE_TYPES, SourceContext, build_lag_source
from groupops.lag.reset import apply_reset, read_reset
from groupops.model import MemberId, TopicPartition
from groupops.planner.handoff import HandoffError, HandoffResult, MemberState, fence_epoch, predicted_plan
from groupops.planner.plan_format import PublishedPlan, fence_annotations
from groupops.planner.plan_size import plan_configmap_problem
from groupops.planner.target import Trigger
from groupops.planner.wire import PlanFormatError

__all__ = [
    "LAG_WAIT_S",
    "Deps",
    "PolicyMemory",
    "ReconcileFailure",
    "ReconcileResult",
    "SettledCheck",
    "TakenLag",
    "begin_settled_check",
    "finish_settled_check",
    "reconcile",
]

log = logging.getLogger(__name__)


def reconcile(
    body: Mapping[str, Any], deps: Deps, memory: PolicyMemory, *, pretaken: TakenLag | None = None
) -> ReconcileResult:
    """Run every step once for the policy `body` (the full resource as last seen; the run works
    on its own copy). `pretaken`: the lag a settled check read just before and found changed
    (`finish_settled_check`): the run plans on it instead of reading again."""
    run = _run_context(body, deps, memory)
    started = time.monotonic()
    memory.settled = None  # a run that does not settle again leaves none
    memory.own_status_write = None
    try:
        return _reconcile(replace(run, body=json_copy(body)), pretaken)
    except ReconcileFailure as failure:
        deps.metrics.errors.labels(run.policy.namespace, run.policy.name, failure.reason).inc()
        raise
    finally:
        deps.metrics.reconcile_seconds.labels(run.policy.namespace, run.policy.name).observe(
            time.monotonic() - started
        )


def _run_context(body: Mapping[str, Any], deps: Deps, memory: PolicyMemory) -> RunContext:
    policy = PolicyRef.from_body(body)
    spec_obj = body.get("spec") or {}
    adapter = PolicyLog(
        log, {"policy": f"{policy.namespace}/{policy.name}", "group": spec_obj.get("groupId", "?")}
    )
    return RunContext(policy=policy, body=body, deps=deps, memory=memory, now=deps.wall_clock(), log=adapter)


LAG_WAIT_S = 1.0
"""How long a run waits for the lag read it started before planning on what is known."""

TakenLag = tuple[LagSnapshot, tuple[str, str] | None, Windows | None]
"""A run's lag: the snapshot it plans by, the Degraded reason and message when the newest read
failed, and the time-lag windows of the snapshot (`_read_lag`)."""


@dataclass(frozen=True, slots=True)
class SettledCheck:
    """A settled policy's check between its halves: the lag read it started, and what the
    settled run saw (docs/design.md §8.3, "a settled policy's loop parks, and one sweep checks
    every parked policy")."""

    run: RunContext
    settled: Settled
    started: _Started | None
    """None: the source reads what the settled run read (`FIXED_SOURCE_TYPES`); nothing started."""


def begin_settled_check(body: Mapping[str, Any], deps: Deps, memory: PolicyMemory) -> SettledCheck | None:
    """The first half of a settled policy's check, which only reads `body`: its inputs against
    what its last full run saw, and its lag read started (not waited for, so that the reads of
    many policies go out together). None: the policy runs in full, because it is not settled,
    its `until` came or one of its inputs changed; no lag read was started then."""
    settled = memory.settled
    if settled is None or time.monotonic() >= settled.until:
        return None
    run = _run_context(body, deps, memory)
    if _inputs_of(run) != settled.inputs:
        return None
    if settled.spec.lag_source.type in FIXED_SOURCE_TYPES:
        return SettledCheck(run=run, settled=settled, started=None)
    started = _start_lag_read(
        run, settled.spec, settled.client_config, previous=settled.previous, reader=settled.reader
    )
    return SettledCheck(run=run, settled=settled, started=started)


def finish_settled_check(check: SettledCheck, wait_s: float = LAG_WAIT_S) -> TakenLag | None:
    """The second half: wait up to `wait_s` for the lag read and compare it and
    the replicas' progress with what the settled run saw. None: nothing changed, and the tick is
    skipped (counted in groupops_reconciles_skipped_total); otherwise the lag read, which the
    full run plans on (same inputs, same read)."""
    run, settled = check.run, check.settled
    if check.started is None:
        if _progress_behind(run, settled.leases):
            return replace(settled.lag, taken_at=run.now.timestamp()), None, None
        run.deps.metrics.reconciles_skipped.labels(run.policy.namespace, run.policy.name).inc()
        return None
    lag = _read_lag(
        run,
        settled.spec,
        settled.client_config,
        previous=settled.previous,
        has_plan=settled.has_plan,
        started=check.started,
        wait_s=wait_s,
    )
    snapshot, degraded, windows = lag
    if degraded is not None or _progress_behind(run, settled.leases):
        return lag
    if settled.by_counts is None:
        if comparable(snapshot) != settled.lag:
            return lag
    elif not _same_shape(run, settled.spec, settled.by_counts, snapshot, windows):
        return lag
    run.deps.metrics.reconciles_skipped.labels(run.policy.namespace, run.policy.name).inc()
    return None


def _same_shape(
    run: RunContext, spec: PolicySpec, by_counts: CountSettled, snapshot: LagSnapshot, windows: Windows | None
) -> bool:
    """The read has the shape the settled run saw (`settled.LagShape`); if so its lag gauges are
    set from it here, as the full run would have set them."""
    state = (
        None
        if windows is None
        else judged_again(windows, spec, owners=by_counts.owners, live=by_counts.live, status=run.status)
    )
    if shape_of(snapshot, _stuck_shape(state)) != by_counts.shape or _figures_may_go_out(run, snapshot):
        return False
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    metrics.total_lag.labels(ns, name).set(snapshot.total())
    metrics.record_members(ns, name, _member_lags(snapshot, by_counts.members))
    if state is not None:
        record_lag_state(run, state, by_counts.members)
    return True


def _figures_may_go_out(run: RunContext, snapshot: LagSnapshot) -> bool:
    """The lag differs from what status shows and the figures' pace would let a full run write it
    now (`report._write_paced`): a group that was idle shows its new lag at once, as a policy
    settled on its whole lag would."""
    last = run.memory.status_written_at
    every = run.deps.settings.reconcile.status_figures_seconds
    paced = last is not None and time.monotonic() - last < every
    return not paced and snapshot.total() != run.status.get("totalLag")


def _stuck_shape(state: LagState | None) -> StuckShape | None:
    return None if state is None else frozenset((s.tp, s.state) for s in state.stuck)


def _member_lags(snapshot: LagSnapshot, members: Mapping[str, Sequence[TopicPartition]]) -> dict[str, int]:
    """Each identity's lag: the sum over its partitions (as status.members[].lag)."""
    lags = snapshot.lags
    return {
        identity: sum(
            lags[tp.topic][tp.partition]
            for tp in partitions
            if tp.topic in lags and tp.partition < len(lags[tp.topic])
        )
        for identity, partitions in members.items()
    }


def _inputs_of(run: RunContext) -> tuple[object, ...] | None:
    """What a run reads from the API, by resourceVersion: the policy and, from the watch caches,
    every object it owns and the Secrets of its namespace (None: no caches, or one not synced)."""
    caches = run.deps.caches
    if caches is None:
        return None
    owned = caches.versions(run.policy.namespace, owned_selector(run.policy.name))
    if owned is None:
        return None
    return (run.body.get("metadata", {}).get("resourceVersion"), owned)


def _progress_behind(run: RunContext, leases: Sequence[str]) -> bool:
    """A replica's heartbeats report progress far enough behind for status to show it."""
    book = run.deps.heartbeats
    if book is None:
        return False
    heard = (book.progress_of(run.policy.namespace, lease) for lease in leases)
    return any(progress is not None and progress_shown(progress) for progress in heard)


def _reconcile(run: RunContext, pretaken: TakenLag | None) -> ReconcileResult:
    inputs = _inputs_of(run)  # before anything is read: a change while the run reads unsettles it
    # -- spec ------------------------------------------------------------------------------------
    try:
        spec = parse_policy(_with_cluster_defaults(run, run.body.get("spec")))
    except SpecError as e:
        fail(run, "InvalidSpec", str(e), transient=False)
    spec = _resolve_cluster(run, spec)
    refusals = [
        *check_pod_template(spec.consumers.template, run.deps.settings.guard),
        *check_kafka_properties(spec.kafka.properties, run.deps.settings.guard),
        *check_bootstrap_servers(spec.kafka.bootstrap_servers, run.deps.settings.guard),
        *check_lag_source_url(spec.lag_source.type, spec.lag_source.settings, run.deps.settings.guard),
    ]
    if refusals:
        fail(run, "Refused", str(GuardError(refusals)), transient=False)
    stand_down_if_later(run)  # conflicts: the later of two policies on one group runs nothing (§6.4)
    ns = run.policy.namespace

    # -- observe ---------------------------------------------------------------------------------
    # From the watch caches (the API while they are not synced); our own writes show at once.
    reader = run.deps.reader
    try:
        configmap = reader.get("v1", "ConfigMap", ns, plan_configmap_name(run.policy.name))
        pods = reader.list("v1", "Pod", ns, label_selector=owned_selector(run.policy.name))
        lease_objects = {
            lease["metadata"]["name"]: lease
            for lease in reader.list(
                "coordination.k8s.io/v1", "Lease", ns, label_selector=owned_selector(run.policy.name)
            )
        }
        client_config = _auth_config(run, spec)
    except KubeError as e:
        fail(run, "KubernetesUnavailable", str(e), transient=True)
    observed = read_plan_configmap(configmap)
    epoch_floor = max(configmap_epoch(configmap), int(run.status.get("epoch") or 0))
    if observed is not None and observed.published.epoch >= epoch_floor:
        previous = observed.published
    else:
        observed = None
        previous = floor_plan(spec.strategy.type, epoch_floor)

    # -- lag -------------------------------------------------------------------------------------
    snapshot, degraded, windows = pretaken or _read_lag(
        run, spec, client_config, previous=previous, has_plan=observed is not None
    )
    # A topic that does not exist (deleted, not created yet) is planned as Kafka's assignors do:
    # nothing of it is assigned, and what replicas owned of it is released (design §6.3).
    topics = {topic: len(snapshot.lags[topic]) for topic in spec.topics if topic in snapshot.lags}
    degraded = _with_missing_topics(degraded, snapshot.missing_topics, topics)
    if spec.consumers.autoscale is None:
        replicas = spec.consumers.replicas
    elif degraded is None and not snapshot.topics_without_series:
        replicas = autoscaled_replicas(run, spec.consumers.autoscale, snapshot.total())
    else:  # no fresh lag, or none for some topics (NoLagSeries): keep the replicas, never scale on a guess
        scale = spec.consumers.autoscale
        replicas = min(scale.maximum, max(scale.minimum, int(run.status.get("replicas") or scale.minimum)))

    # -- identities ------------------------------------------------------------------------------
    settings = run.deps.settings
    lease_seconds = settings.reconcile.lease_duration_seconds
    current_hash = render_pods.template_hash(run.policy, spec, settings.consumer, lease_seconds)
    group_id = spec.group_id
    ordinals = set(range(replicas)) | pod_ordinals(pods)
    identity_of_lease = {
        lease_name(run.policy.name, identity_name(group_id, i)): identity_name(group_id, i) for i in ordinals
    }
    leases_by_identity: dict[str, Mapping[str, Any] | None] = {
        identity_of_lease[name]: obj for name, obj in lease_objects.items() if name in identity_of_lease
    }

    def view_of(plan: PublishedPlan) -> IdentityView:
        return identity_view(
            group_id=group_id,
            replicas=replicas,
            zones=spec.consumers.zones,
            priorities=spec.consumers.priorities,
            capacity=spec.consumers.capacity.of,
            template_hash=current_hash,
            pods=pods,
            leases=leases_by_identity,
            published=plan.plan.assignment,
            releasing_from=frozenset(release.identity for release in plan.releasing.values()),
            clock=run.memory.clock,
            now=time.monotonic(),
            lease_duration=lease_seconds,
            startup_grace=settings.reconcile.startup_grace_seconds,
        )

    view = view_of(previous)

    # -- offset reset (design §9.3) --------------------------------------------------------------
    reset = _OffsetReset(run, spec, client_config, topics)

    # -- plan ------------------------------------------------------------------------------------
    decision = decide(run, spec, snapshot, topics, view, observed, previous, paused=reset.paused)
    fresh = windows if degraded is None else None  # stale or partial lag moves nothing
    decision = hand_off_stalled(run, spec, snapshot, fresh, view, decision, paused=reset.paused)
    if spec.dry_run:
        _record_plan_progress(run, spec, previous, leases_by_identity)
        write_status(
            run,
            spec,
            snapshot,
            view,
            decision,
            epoch=previous.epoch,
            replicas=replicas,
            degraded=degraded,
            windows=windows,
        )
        return ReconcileResult(
            epoch=previous.epoch, published=False, trigger=decision.trigger, status_written=True
        )

    # -- apply -----------------------------------------------------------------------------------
    try:
        _apply_account(run, view)
        _apply_leases(run, view, lease_objects, lease_seconds)
        fence = _Fencer(
            run,
            leases_by_identity,
            exited=frozenset(identity for identity, state in view.leases.items() if state.exited),
        )
        result = _handoff(run, spec, decision, previous, view, leases_by_identity, fence)
        if run.deps.heartbeats is not None:
            run.deps.heartbeats.note_max_poll_interval(
                run.policy.namespace, run.policy.name, spec.consumers.max_poll_interval_seconds
            )
            fence.silent_heartbeat_holders(view, previous)
        now_plan = _publish(run, decision, result, configmap, observed)
        _note_fleet(run, spec, now_plan, handed_over(previous, now_plan) if now_plan is not previous else 0)
        _record_plan_progress(run, spec, now_plan, leases_by_identity, fenced=fence.fenced)
        if run.deps.heartbeats is not None:
            run.deps.heartbeats.note_published(run.policy.namespace, run.policy.name, now_plan.epoch)
        if now_plan is not previous or fence.fenced:
            view = view_of(now_plan)  # else the run's view stands: same plan, Leases and pods
        _apply_pods(run, spec, view, lease_objects, lease_seconds)
        reset.carry_out(now_plan)
    except Rejected as e:
        fail(run, "ObjectRejected", str(e), transient=False, degraded=True)
    except KubeError as e:
        fail(run, "KubernetesUnavailable", str(e), transient=True, degraded=True)
    shown = replace(decision, shown=normalized(now_plan.plan.assignment), published=now_plan is not previous)
    broker = (
        _broker_agreement(run, spec, client_config, now_plan, snapshot)
        if spec.consumers.delivery == "native"
        else None
    )
    written = write_status(
        run,
        spec,
        snapshot,
        view,
        shown,
        epoch=now_plan.epoch,
        replicas=replicas,
        broker=broker,
        degraded=degraded,
        offset_reset=reset.status,
        in_progress=_in_progress(now_plan, view, replicas),
        windows=windows,
    )
    run.memory.settled = _settled_after(
        run,
        spec,
        inputs=inputs,
        lag_read=(client_config, observed is not None),
        snapshot=snapshot,
        windows=windows,
        view=view,
        unsettled=unsettled_reason(
            spec=spec,
            plan=now_plan,
            published=now_plan is not previous,
            trigger=decision.trigger,
            waiting=decision.waiting,
            view=view,
            startup_grace=settings.reconcile.startup_grace_seconds,
            degraded=degraded is not None,
            time_lag_known=windows is not None,
            total_lag=snapshot.total(),
            stall_handoffs=bool(run.memory.stall_handoffs),
            offset_reset=reset.active,
        ),
        plan=now_plan,
        quiet_s=decision.damping_quiet_s,
    )
    return ReconcileResult(
        epoch=now_plan.epoch,
        published=now_plan.epoch != previous.epoch,
        trigger=decision.trigger,
        status_written=written,
    )


def _settled_after(
    run: RunContext,
    spec: PolicySpec,
    *,
    inputs: tuple[object, ...] | None,
    lag_read: tuple[Mapping[str, str], bool],
    snapshot: LagSnapshot,
    windows: Windows | None,
    view: IdentityView,
    unsettled: str | None,
    plan: PublishedPlan,
    quiet_s: float,
) -> Settled | None:
    """What the next routine runs compare (`settled`), when this full run left no rule waiting
    on time; None otherwise. `lag_read`: the client config and has-plan its lag read used;
    `quiet_s`: how long damping stays quiet on these figures (`Decision.damping_quiet_s`)."""
    resync = run.deps.settings.reconcile.resync_seconds
    if inputs is None or resync <= 0:
        return None
    leases = tuple(lease_name(run.policy.name, identity) for identity in view.identities_by_ordinal.values())
    if unsettled is None and _progress_behind(run, leases):
        unsettled = "a replica's progress is behind"
    if unsettled is None and quiet_s <= 0:
        unsettled = "damping's cooldown or interval is due"
    if unsettled is not None:
        run.log.debug("not settled: %s", unsettled)
        return None
    own = run.memory.own_status_write
    if own is not None and inputs[0] == own[0]:
        # The policy changed only by this run's status write: its next check must not take that
        # for a change and run it in full again.
        inputs = (own[1], *inputs[1:])
    client_config, has_plan = lag_read
    now = time.monotonic()
    until = now + min(resync, quiet_s)
    if run.memory.figures_due is not None:  # held-back figures go out on time though nothing moves
        until = min(until, run.memory.figures_due)
    by_counts = None
    if plans_on_counts(spec):
        by_counts = _count_settled(run, spec, snapshot=snapshot, windows=windows, view=view, plan=plan)
        if windows is not None and snapshot.total() > 0:
            # time lag grows while the lag stands (the check sees no total move): a full run comes
            # at the figures' pace to show it
            until = min(until, now + run.deps.settings.reconcile.status_figures_seconds)
    return Settled(
        inputs=inputs,
        lag=comparable(snapshot),
        spec=spec,
        client_config=client_config,
        previous=plan,
        has_plan=has_plan,
        leases=leases,
        until=until,
        by_counts=by_counts,
        reader=_lag_reader(run, spec, client_config, previous=plan),
    )


def _count_settled(
    run: RunContext,
    spec: PolicySpec,
    *,
    snapshot: LagSnapshot,
    windows: Windows | None,
    view: IdentityView,
    plan: PublishedPlan,
) -> CountSettled:
    """What the check of a settled policy that plans on counts compares (`settled.CountSettled`),
    judged as this run's status was."""
    shown = normalized(plan.plan.assignment)
    owners, live = ownership(spec, view, shown, snapshot)
    state = (
        None if windows is None else judged_again(windows, spec, owners=owners, live=live, status=run.status)
    )
    return CountSettled(
        shape=shape_of(snapshot, _stuck_shape(state)),
        owners=owners,
        live=live,
        members={
            identity: tuple(shown.get(identity, ())) for identity in view.identities_by_ordinal.values()
        },
    )


# -- steps ---------------------------------------------------------------------------------------


def _with_cluster_defaults(run: RunContext, spec: Any) -> Any:
    """The policy's spec as written, with its ConsumerGroupCluster's policyDefaults under the
    fields it leaves unset (design §15)."""
    clusters = run.deps.clusters
    kafka = spec.get("kafka") if isinstance(spec, Mapping) else None
    ref = kafka.get("clusterRef") if isinstance(kafka, Mapping) else None
    name = ref.get("name") if isinstance(ref, Mapping) else None
    if clusters is None or not isinstance(name, str) or not name:
        return spec
    return with_policy_defaults(clusters.policy_defaults_of(name), spec)


def _resolve_cluster(run: RunContext, spec: PolicySpec) -> PolicySpec:
    """spec.kafka.clusterRef resolved from the ConsumerGroupCluster (design §15); a policy with
    inline brokers leaves any cluster it named before."""
    clusters = run.deps.clusters
    key = (run.policy.namespace, run.policy.name)
    if clusters is None:
        if spec.kafka.cluster_ref is not None:
            fail(
                run,
                "ClusterNotFound",
                "this operator runs without ConsumerGroupClusters (spec.kafka.clusterRef)",
                transient=False,
            )
        return spec
    try:
        return clusters.resolve(key, spec)
    except ClusterRefusal as refusal:
        fail(run, refusal.reason, refusal.message, transient=refusal.transient)


def _note_fleet(run: RunContext, spec: PolicySpec, plan: PublishedPlan, moves: int) -> None:
    """Tell the policy's cluster whether its handoff is still in flight and what it moved."""
    clusters, cluster = run.deps.clusters, spec.kafka.cluster_ref
    if clusters is None or cluster is None:
        return
    clusters.note_plan(
        cluster, (run.policy.namespace, run.policy.name), in_flight=bool(plan.releasing), moves=moves
    )


def _in_progress(plan: PublishedPlan, view: IdentityView, replicas: int) -> str | None:
    """What the operator still works toward on its own (status Reconciling=True), or None."""
    if plan.releasing:
        return f"{len(plan.releasing)} partitions wait for their previous owners to release them"
    if view.draining:
        return f"draining {', '.join(sorted(view.draining))} before its pod is replaced"
    if view.ready < replicas:
        return f"{view.ready} of {replicas} replicas ready"
    return None


class _OffsetReset:
    """The offset-reset step of one run (controller/offset_reset.py): which partitions the plan
    holds back, and, once their owners released them, the reset itself. `status` is what
    status.offsetReset becomes (None: unchanged)."""

    def __init__(
        self, run: RunContext, spec: PolicySpec, client_config: Mapping[str, str], topics: Mapping[str, int]
    ) -> None:
        self._run, self._spec, self._client_config, self._topics = run, spec, client_config, topics
        self.paused: frozenset[TopicPartition] = frozenset()
        self.status: dict[str, Any] | None = None
        self._request: offset_reset.ResetRequest | None = None
        annotations = run.body.get("metadata", {}).get("annotations")
        try:
            request = offset_reset.read_request(annotations)
        except offset_reset.ResetRequestError as e:
            request_id = offset_reset.request_id_of(annotations)
            if offset_reset.pending_id(request_id, run.status):
                self.status = offset_reset.reset_status(run, request_id, "Failed", str(e))
            return
        if not offset_reset.pending(request, run.status):
            return
        assert request is not None
        self._request = request
        refusal = self._refusal()
        if refusal is not None:
            self.status = offset_reset.reset_status(run, request.id, "Failed", refusal, request=request)
            return
        try:
            partitions = offset_reset.paused_partitions(request, topics)
        except offset_reset.ResetRequestError as e:
            self.status = offset_reset.reset_status(run, request.id, "Failed", str(e), request=request)
            return
        if not request.execute:
            self._finish(partitions, execute=False)
            return
        self.paused = frozenset(partitions)
        self.status = offset_reset.reset_status(
            run,
            request.id,
            "Pausing",
            f"waiting for the owners of {len(partitions)} partitions to release them",
            request=request,
        )

    @property
    def active(self) -> bool:
        """A reset is asked for and not finished, or this run changed its status."""
        return self._request is not None or self.status is not None

    def _refusal(self) -> str | None:
        if self._request is not None and self._request.execute and self._spec.dry_run:
            return "the policy is a dry run: its plans are never applied, so nothing can be paused"
        if self._spec.consumers.delivery == "native":
            return (
                "delivery native: the replicas are members of the group and Kafka refuses new offsets "
                "while it has members; scale the policy to 0 replicas first"
            )
        return None

    def carry_out(self, plan: PublishedPlan) -> None:
        """Reset once the published plan has none of the paused partitions owned or releasing."""
        if not self.paused:
            return
        held = offset_reset.still_held(plan, sorted(self.paused))
        if held:
            return
        self._finish(sorted(self.paused), execute=True)
        self._run.memory.poke()  # assign them again at once

    def _finish(self, partitions: list[TopicPartition], *, execute: bool) -> None:
        request, run, spec = self._request, self._run, self._spec
        assert request is not None
        try:
            source = kafka_lag.from_spec({}, _source_context(run, spec, self._client_config))
            try:
                rows = read_reset(source, spec.group_id, partitions, request.target)
                if execute:
                    apply_reset(source, spec.group_id, rows)
            finally:
                source.close()
        except (LagError, ValueError) as e:
            self.status = offset_reset.reset_status(run, request.id, "Failed", str(e), request=request)
            run.log.warning("offset reset %s failed: %s", request.id, e)
            return
        state = "Done" if execute else "DryRun"
        message = (
            f"{len(rows)} partitions reset to {request.describe()}; their owners start there"
            if execute
            else f"dry run: {len(rows)} partitions would be reset to {request.describe()}"
        )
        self.status = offset_reset.reset_status(run, request.id, state, message, request=request, rows=rows)
        run.log.info("offset reset %s: %s", request.id, message)


def _auth_config(run: RunContext, spec: PolicySpec) -> dict[str, str]:
    """The librdkafka properties of the operator's own reads (lag, offsets, group descriptions):
    the policy's ConsumerGroupCluster's operatorAuthSecretRef when it names one (design §15),
    else the policy's auth Secret."""
    if spec.kafka.operator_auth is not None:
        namespace, name = spec.kafka.operator_auth
        field = f"spec.operatorAuthSecretRef of ConsumerGroupCluster {spec.kafka.cluster_ref}"
    elif spec.kafka.auth_secret:
        namespace, name = run.policy.namespace, spec.kafka.auth_secret
        field = "spec.kafka.authSecretRef.name"
    else:
        return {}
    try:
        secret = run.deps.reader.get("v1", "Secret", namespace, name)
    except Forbidden as e:
        fail(
            run,
            "AuthSecretForbidden",
            f"the operator may not read Secret {name!r} ({field}): "
            f"list it in the chart's kafkaAuthSecrets ({e})",
            transient=False,
        )
    if secret is None:
        fail(
            run,
            "AuthSecretMissing",
            f"Secret {name!r} ({field}) not found in namespace {namespace!r}",
            transient=True,
        )
    data = secret.get("data") or {}
    config = {key: base64.b64decode(value).decode("utf-8", "replace") for key, value in data.items()}
    refusals = check_kafka_properties(config, run.deps.settings.guard, where=f"Secret {name}")
    if refusals:
        fail(run, "Refused", str(GuardError(refusals)), transient=False)
    return config


def _broker_agreement(
    run: RunContext,
    spec: PolicySpec,
    client_config: Mapping[str, str],
    plan: PublishedPlan,
    snapshot: LagSnapshot,
) -> BrokerAgreement:
    """The prediction against Kafka's assignment: the one the lag read just described (`kafka`
    source), else a DescribeGroups of its own."""
    predicted = {str(identity): tps for identity, tps in plan.plan.assignment.items()}
    if snapshot.assignment is not None:
        agreement = compare_with_broker(predicted, snapshot.assignment, plan.epoch)
    else:
        agreement = read_broker_agreement(
            bootstrap_servers=spec.kafka.bootstrap_servers,
            client_config={**spec.kafka.properties, **client_config},
            group_id=spec.group_id,
            predicted=predicted,
            epoch=plan.epoch,
            timeout_s=run.deps.settings.reconcile.lag_timeout_seconds,
        )
    if agreement.matches is False:
        run.log.info("%s", agreement.message)
    return agreement


LagReader = tuple[SourceContext, Callable[[], LagSnapshot]]
"""A policy's lag source context and its read (`_lag_reader`)."""

_Started = tuple[SourceContext, Future[LagSnapshot] | None]
"""A lag read started by `_start_lag_read`: its source context and its future (None: read
already, without a pool)."""


def _lag_reader(
    run: RunContext, spec: PolicySpec, client_config: Mapping[str, str], *, previous: PublishedPlan
) -> LagReader:
    """How the policy's lag is read: its source context and the read itself. Equal inputs give
    an equal reader, so a settled policy keeps the one its full run built (`Settled.reader`)."""
    context = _source_context(run, spec, client_config)
    if context.history is not None and spec.consumers.delivery == "plan" and run.deps.history is not None:
        # the replicas never join the Kafka group: the history names the plan's owners (§10)
        owners = {tp: str(identity) for tp, identity in previous.owner_of().items()}
        context = replace(context, history=PlannedOwners(run.deps.history, owners))
    readers = run.deps.kafka_readers

    def read() -> LagSnapshot:
        if spec.lag_source.type == "kafka" and readers is not None:
            source: LagSource = readers.source(spec.lag_source.settings, context)
        else:
            source = build_lag_source(spec.lag_source.type, spec.lag_source.settings, context)
        try:
            return source.read(spec.group_id, list(spec.topics))
        finally:
            source.close()

    return context, read


def _start_lag_read(
    run: RunContext,
    spec: PolicySpec,
    client_config: Mapping[str, str],
    *,
    previous: PublishedPlan,
    reader: LagReader | None = None,
) -> _Started:
    """Start the policy's lag read (or find the one in flight: one per policy) without waiting;
    `reader`: one `_lag_reader` built for these arguments already."""
    context, read = reader or _lag_reader(run, spec, client_config, previous=previous)
    future = run.memory.lag.start(
        read,
        pool=run.deps.lag_pool,
        on_late_result=run.memory.lag_landed,
        auto_offset_reset=spec.strategy.auto_offset_reset,
    )
    return context, future


def _read_lag(
    run: RunContext,
    spec: PolicySpec,
    client_config: Mapping[str, str],
    *,
    previous: PublishedPlan,
    has_plan: bool,
    started: _Started | None = None,
    wait_s: float = LAG_WAIT_S,
) -> TakenLag:
    """The lag to plan by, when the newest read failed the Degraded reason and message
    (`controller.lagread`: the run never waits long on the source), and the time-lag windows of
    that lag (None when it has none: a source without offsets, or partition counts only).
    `started`: the read `_start_lag_read` started for this run (None: start one here)."""
    context, future = started or _start_lag_read(run, spec, client_config, previous=previous)
    take = run.memory.lag.wait(future, wait_s=wait_s)
    _record_lag_take(run, spec.lag_source.type, take)
    known = take.snapshot if take.snapshot is not None and _covers(take.snapshot, spec.topics) else None
    windows = take.windows if known is not None else None
    if take.error is None and known is not None:
        return known, None, windows
    if take.error is None:  # the first read of this policy is still running
        reason, problem = "LagPending", f"the first lag read has not answered within {LAG_WAIT_S:g} s"
    else:
        reason, problem = _lag_reason(take.error), str(take.error)
        if isinstance(take.error, LagSourceConfigError):
            fail(run, reason, problem, transient=False)
    fallback = known, f"the last lag read ({take.age_s or 0:.0f} s old)"
    if known is None:
        fallback = _counts_fallback(run, spec, context, previous)
    snapshot, basis = fallback
    if snapshot is None:
        fail(run, reason, problem, transient=True, degraded=has_plan)
    message = f"{problem}; planning on {basis}"
    run.log.warning("%s: %s", reason, message)
    return snapshot, (reason, message), windows


def _record_lag_take(run: RunContext, source: str, take: LagTake) -> None:
    """The lag gauges and the failure counter for what this run took (nothing is known while the
    policy's first read has not answered). `PolicyLag.take` does not say whether its error is one
    this policy's runs have seen already, so a failure counts once per run that finds it."""
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    if take.error is not None:
        metrics.record_lag_source(ns, name, source, up=False)
        metrics.lag_read_failures.labels(ns, name, source).inc()
    elif take.snapshot is not None:
        metrics.record_lag_source(ns, name, source, up=True)
    if take.age_s is not None:
        metrics.lag_age_seconds.labels(ns, name).set(take.age_s)


def _source_context(run: RunContext, spec: PolicySpec, client_config: Mapping[str, str]) -> SourceContext:
    """How this run reaches the policy's Kafka, and the Secrets its lag source names (lag reads,
    offset resets: `lagaccess`)."""
    context = SourceContext(
        bootstrap_servers=spec.kafka.bootstrap_servers,
        client_config={**spec.kafka.properties, **client_config},
        auto_offset_reset=spec.strategy.auto_offset_reset,
        timeout_seconds=run.deps.settings.reconcile.lag_timeout_seconds,
        history=run.deps.history,
    )
    return with_policy_access(run, context)


def _covers(snapshot: LagSnapshot, topics: Sequence[str]) -> bool:
    return all(topic in snapshot.lags or topic in snapshot.missing_topics for topic in topics)


def _with_missing_topics(
    degraded: tuple[str, str] | None, missing: Sequence[str], remaining: Mapping[str, int]
) -> tuple[str, str] | None:
    """Degraded=True with reason TopicsMissing when topics of the policy do not exist (or the
    lag problem's reason, with the missing topics added to its message)."""
    if not missing:
        return degraded
    one = len(missing) == 1
    note = (
        f"{'topic' if one else 'topics'} {', '.join(missing)} not found on the cluster: nothing of "
        f"{'it' if one else 'them'} is assigned; planning on {', '.join(remaining) or 'no topic'}"
    )
    if degraded is None:
        return "TopicsMissing", note
    return degraded[0], f"{degraded[1]}; {note}"


def _lag_reason(error: LagError) -> str:
    if isinstance(error, UnknownTopicError):
        return "TopicNotFound"
    if isinstance(error, LagAuthorizationError):
        return "LagSourceUnauthorized"
    if isinstance(error, LagSourceConfigError):
        return "LagSourceInvalid"
    if isinstance(error, LagSourceUnavailable):
        return "LagSourceUnavailable"
    return "LagSourceFailed"


def _counts_fallback(
    run: RunContext, spec: PolicySpec, context: SourceContext, previous: PublishedPlan
) -> tuple[LagSnapshot | None, str]:
    """Partition counts without lag: from Kafka's metadata (unless the failed source is Kafka
    itself), else from the published plan."""
    if spec.lag_source.type != "kafka":
        quick = replace(context, timeout_seconds=min(context.timeout_seconds, _METADATA_TIMEOUT_S))
        try:
            metadata = kafka_lag.from_spec({}, quick)
            try:
                counts = metadata.partition_counts(list(spec.topics))
            finally:
                metadata.close()
            return zero_lag(spec.group_id, counts), "partition counts from Kafka's metadata"
        except LagError as e:
            run.log.info("no partition counts from Kafka either: %s", e)
    from_plan = counts_from_plan(previous, list(spec.topics))
    if from_plan is None:
        return None, ""
    return zero_lag(spec.group_id, from_plan), f"partition counts from plan epoch {previous.epoch}"


_METADATA_TIMEOUT_S = 3.0


def _handoff(  # noqa: PLR0917
    run: RunContext,
    spec: PolicySpec,
    decision: Decision,
    previous: PublishedPlan,
    view: IdentityView,
    leases: Mapping[str, Mapping[str, Any] | None],
    fence: Fence,
) -> HandoffResult | None:
    """The handoff step towards the decided target (None: keep the plan as it is)."""
    if decision.target is None:
        return None
    if spec.consumers.delivery == "native":
        typed = {MemberId(identity): tuple(tps) for identity, tps in decision.target.items()}
        try:
            return predicted_plan(previous, typed, strategy=spec.strategy.type)
        except HandoffError as e:
            fail(run, "PlanInvalid", str(e), transient=False, degraded=True)

    try:
        return step(
            previous,
            decision.target,
            leases=view.leases,
            lease_objects=leases,
            members=decision.members,
            strategy=spec.strategy.type,
            now=run.now.timestamp(),
            fence=fence,
        )
    except HandoffError as e:  # a strategy broke its contract: a bug, reported, never published
        fail(run, "PlanInvalid", str(e), transient=False, degraded=True)


class _Fencer:
    """fence(identity, epoch): void what the identity's holder owned under plans <= epoch, with
    compare-and-swap on the Lease version it was judged silent on, after the heartbeat guard
    (`HeartbeatBook.may_fence`) agreed that no heartbeat was granted meanwhile. For an `exited`
    holder (its pod's status shows its container gone, `planner/exits.py`) the guard only
    records the refusal: a grant given before the exit reaches no process. One per run: an
    identity is fenced at most once per run (a second try would conflict with the first)."""

    def __init__(
        self,
        run: RunContext,
        leases: Mapping[str, Mapping[str, Any] | None],
        *,
        exited: frozenset[str] = frozenset(),
    ) -> None:
        self._run = run
        self._leases = leases
        self._exited = exited
        self.fenced: set[str] = set()

    def __call__(self, identity: str, epoch: int) -> bool:
        run, book = self._run, self._run.deps.heartbeats
        lease = self._leases.get(identity)
        if lease is None or identity in self.fenced:
            return identity in self.fenced
        meta = lease["metadata"]
        try:
            incarnation = LEASE_RECORDS.of(lease).incarnation
        except PlanFormatError:
            incarnation = None
        name, version = str(meta["name"]), str(meta["resourceVersion"])
        duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 0) or float(
            run.deps.settings.reconcile.lease_duration_seconds
        )
        ns = run.policy.namespace
        exited = identity in self._exited
        if book is not None and not book.may_fence(
            ns,
            run.policy.name,
            name,
            incarnation=incarnation,
            version=version,
            duration_s=0.0 if exited else duration,
        ):
            run.log.info("not fencing %s: it sent a heartbeat meanwhile", identity)
            return False
        try:
            run.deps.client.patch(
                "coordination.k8s.io/v1",
                "Lease",
                ns,
                name,
                {
                    "metadata": {
                        "resourceVersion": version,
                        "annotations": fence_annotations(epoch, incarnation),
                    }
                },
            )
        except (Conflict, NotFound):
            if book is not None:
                book.fence_failed(ns, name, version=version)
            return False
        self.fenced.add(identity)
        run.deps.metrics.fences.labels(ns, run.policy.name).inc()
        why = "its container exited" if exited else "Lease expired or never taken"
        run.log.info("fenced %s through epoch %d (%s)", identity, epoch, why)
        return True

    def silent_heartbeat_holders(self, view: IdentityView, previous: PublishedPlan) -> None:
        """Fence every silent holder in heartbeat mode the handoff did not fence (it held nothing
        to hand over), so that a new process of its identity may take the Lease: in heartbeat
        mode only the operator's fence names a dead incarnation (docs/design.md §7.5)."""
        for identity, state in sorted(view.leases.items()):
            lease = self._leases.get(identity)
            if lease is None or not state.expired or identity in self.fenced:
                continue
            try:
                record = LEASE_RECORDS.of(lease)
            except PlanFormatError:
                continue
            if record.heartbeats and record.incarnation and record.fenced_incarnation != record.incarnation:
                self(identity, fence_epoch(previous, member_states(self._leases)))


def _record_plan_progress(
    run: RunContext,
    spec: PolicySpec,
    plan: PublishedPlan,
    leases: Mapping[str, Mapping[str, Any] | None],
    *,
    fenced: Collection[str] = (),
) -> None:
    """The gauges of the plan in force after this run, set on every run (so they go back to 0
    once the handoffs are done): its members that have not acknowledged its epoch, its pending
    releases, and the age of the oldest. `leases` are as the run read them; those it `fenced`
    since are void. With delivery native nobody acknowledges epochs (Kafka's generations fence):
    nobody is behind."""
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    behind = 0
    if spec.consumers.delivery != "native":
        states = member_states(leases)
        behind = sum(
            1
            for identity in plan.plan.assignment
            if identity not in fenced and _behind(states.get(identity, MemberState()), plan.epoch)
        )
    metrics.members_behind_plan.labels(ns, name).set(behind)
    metrics.handoffs_in_flight.labels(ns, name).set(len(plan.releasing))
    oldest = min((release.since for release in plan.releasing.values()), default=None)
    age = 0.0 if oldest is None else max(0.0, run.now.timestamp() - oldest)
    metrics.oldest_handoff_seconds.labels(ns, name).set(age)


def _behind(state: MemberState, epoch: int) -> bool:
    """Not acknowledged `epoch` yet, and not void: a Lease whose newest word is a release or a
    fence (released-through at or above its acknowledged epoch) has no holder that applies plans;
    the next process of the identity acknowledges afresh."""
    void = state.released_through is not None and state.void_through() >= state.acked()
    return state.acked() < epoch and not void


def _publish(
    run: RunContext,
    decision: Decision,
    result: HandoffResult | None,
    configmap: Mapping[str, Any] | None,
    observed: ObservedPlan | None,
) -> PublishedPlan:
    """Write the next plan when the handoff changed it (or when only the taking-part identities
    changed: same epoch, new note). Returns the plan the consumers now follow."""
    if result is None:
        assert observed is not None or configmap is None
        return observed.published if observed is not None else floor_plan("", configmap_epoch(configmap))
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    for move in result.completed:
        metrics.handoff_seconds.labels(ns, name).observe(move.duration_s)
    same_note = (
        observed is not None
        and observed.members == decision.members
        and observed.generation == run.policy.generation
    )
    if not result.changed and same_note:
        return result.published
    leadership = run.deps.leadership
    desired = render_plan_configmap(
        run.policy,
        result.published,
        generation=run.policy.generation,
        members=decision.members,
        leader=None if leadership is None else leadership.identity,
        term=None if leadership is None else leadership.term,
    )
    _check_may_write_plan(run, configmap)
    too_large = plan_configmap_problem(desired["data"], desired["metadata"].get("annotations") or {})
    if too_large is not None:  # refused before the API server would (design §7.1): the last plan runs
        fail(run, "PlanTooLarge", too_large, transient=False, degraded=True)
    if result.changed:
        _record_epoch(run, result.published.epoch)
    apply(run.deps.client, desired, configmap, log=run.log, exclusive_create=True)
    if not result.changed:
        return result.published
    epoch = result.published.epoch
    if result.resync is not None:
        metrics.rebalances.labels(ns, name, "Resync").inc()
        run.event(
            "Warning",
            "Resync",
            f"epoch {epoch} keeps every replica to what it holds and grants nothing until all "
            f"acknowledge it: {result.resync}",
        )
        run.log.warning("published resync plan epoch %d: %s", epoch, result.resync)
        return result.published
    reason = decision.trigger or Trigger.HANDOFF.value
    metrics.rebalances.labels(ns, name, reason).inc()
    metrics.moves.labels(ns, name).inc(
        handed_over(observed.published if observed else None, result.published)
    )
    before = "-" if decision.max_lag_before is None else f"{decision.max_lag_before:,.0f}"
    waiting = f", {len(result.waiting)} partitions waiting for release" if result.waiting else ""
    run.event(
        "Normal",
        "Rebalanced",
        f"epoch {epoch} ({'approved proposal' if decision.approved else reason}): "
        f"{decision.moves} moves, max member lag {decision.max_lag_after:,.0f} (was {before}){waiting}",
    )
    run.log.info("published plan epoch %d (%s)%s", epoch, reason, waiting)
    return result.published


def _check_may_write_plan(run: RunContext, configmap: Mapping[str, Any] | None) -> None:
    """Only the leader writes plans, and never over a plan of a newer term (it was deposed; the
    write would be refused by compare-and-swap anyway if the new leader wrote after our read)."""
    leadership = run.deps.leadership
    if leadership is None:
        return
    metrics, ns, name = run.deps.metrics, run.policy.namespace, run.policy.name
    if not leadership.still_leading():
        raise ReconcileFailure("NotLeading", "not sure it still leads: the plan stays", transient=True)
    if configmap_term(configmap) > leadership.term:
        metrics.plan_writes_refused.labels(ns, name).inc()
        raise ReconcileFailure(
            "Deposed",
            f"the plan was written in leader term {configmap_term(configmap)}, newer than ours "
            f"({leadership.term}): the plan stays",
            transient=True,
        )


def _record_epoch(run: RunContext, epoch: int) -> None:
    """Record the epoch in status before the plan that carries it is written: whatever happens
    to the ConfigMap afterwards (deleted, an older copy restored), the next epoch is higher than
    any plan a replica may have applied, and the handoff resyncs (docs/design.md §7)."""
    run.deps.client.patch(
        f"{API_GROUP}/{API_VERSION}",
        KIND,
        run.policy.namespace,
        run.policy.name,
        {"status": {"epoch": epoch}},
        subresource="status",
    )


def _apply_account(run: RunContext, view: IdentityView) -> None:
    """One ServiceAccount, Role and RoleBinding per ordinal with a slot or a pod; those of other
    ordinals go, and the account all replicas shared before (design §13.3) once no pod uses it."""
    client, reader, ns = run.deps.client, run.deps.reader, run.policy.namespace
    shared = shared_account_name(run.policy.name)
    shared_in_use = any(pod.service_account == shared for pod in view.pods.values())
    basis = _account_basis(run, view, shared_in_use)
    if basis is not None and basis == run.memory.accounts_applied:
        return  # what this would render was applied to these very objects, untouched since
    wanted: set[str] = set()
    for ordinal, identity in sorted(view.identities_by_ordinal.items()):
        lease = lease_name(run.policy.name, identity)
        for desired in (
            render_rbac.render_service_account(run.policy, ordinal),
            render_rbac.render_role(run.policy, ordinal, lease),
            render_rbac.render_role_binding(run.policy, ordinal),
        ):
            wanted.add(desired["metadata"]["name"])
            existing = reader.get(desired["apiVersion"], desired["kind"], ns, desired["metadata"]["name"])
            apply(client, desired, existing, log=run.log)
    for api_version, kind in _ACCOUNT_KINDS:
        for obj in reader.list(api_version, kind, ns, label_selector=owned_selector(run.policy.name)):
            name = obj["metadata"]["name"]
            if name not in wanted and not (name == shared and shared_in_use):
                apply(client, None, obj, log=run.log)
    run.memory.accounts_applied = _account_basis(run, view, shared_in_use)


def _account_basis(run: RunContext, view: IdentityView, shared_in_use: bool) -> tuple[object, ...] | None:
    """What `_apply_account` depends on: the policy, its identities, whether the shared account
    is in use, and the change counts of the account objects it owns in the watch caches (our
    writes count at once). Equal to the basis saved after the last apply, nothing it would
    render or find has changed, so it would write nothing (design §8.3, "a busy run ... applies
    the replicas' accounts only after they changed"). None without caches: always apply."""
    caches = run.deps.caches
    if caches is None:
        return None
    owned = Selector.parse(owned_selector(run.policy.name))
    versions = tuple(caches.kind_versions(kind, run.policy.namespace, owned) for _, kind in _ACCOUNT_KINDS)
    if any(version is None for version in versions):
        return None
    return (run.policy, tuple(sorted(view.identities_by_ordinal.items())), shared_in_use, versions)


_ACCOUNT_KINDS = (
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
)


def _apply_leases(
    run: RunContext, view: IdentityView, lease_objects: Mapping[str, Any], lease_seconds: int
) -> None:
    """One Lease per identity with a slot or a pod; Leases of identities that have neither (left
    behind by a run that stopped between deleting a pod and its Lease) go."""
    wanted = {
        lease_name(run.policy.name, identity): identity for identity in view.identities_by_ordinal.values()
    }
    for name, identity in sorted(wanted.items()):
        desired = render_pods.render_lease(run.policy, identity, lease_seconds=lease_seconds)
        apply(run.deps.client, desired, lease_objects.get(name), log=run.log)
    for name, lease in sorted(lease_objects.items()):
        if name not in wanted:
            apply(run.deps.client, None, lease, log=run.log)
            run.memory.clock.forget(MemberId(name))


def _apply_pods(
    run: RunContext,
    spec: PolicySpec,
    view: IdentityView,
    lease_objects: Mapping[str, Any],
    lease_seconds: int,
) -> None:
    client, ns, settings = run.deps.client, run.policy.namespace, run.deps.settings
    for ordinal, identity, zone in view.slots:
        pod = view.pods.get(ordinal)
        if pod is not None:
            continue
        slot = render_pods.Slot(ordinal=ordinal, identity=identity, zone=zone)
        desired = render_pods.render_pod(
            run.policy, spec, slot, settings=settings.consumer, lease_seconds=lease_seconds
        )
        apply(client, desired, None, log=run.log)
    for ordinal, pod in sorted(view.pods.items()):
        identity = view.identities_by_ordinal[ordinal]
        if identity not in view.releasable or pod.terminating:
            continue
        apply(
            client,
            None,
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod.name, "namespace": ns}},
            log=run.log,
        )
        if ordinal >= len(view.slots):  # scaled away: its Lease goes too
            name = lease_name(run.policy.name, identity)
            if name in lease_objects:
                apply(client, None, lease_objects[name], log=run.log)
            run.memory.clock.forget(MemberId(name))
        run.log.info("handed away and removed %s (%s)", pod_name(run.policy.name, ordinal), identity)


# -- status --------------------------------------------------------------------------------------
