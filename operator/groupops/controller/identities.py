"""Who runs and who takes part: replica slots, pods, Leases -> the identity view of one reconcile.

Pure (the clock is an argument). The reconcile reads pods and Leases, then asks `identity_view`:

1. slots: replicas 0..n-1, identity `<groupId>-<i>`, zone `zones[i % len(zones)]` when rack-aware;
   each member's capacity from `consumers.capacity` (its identity's, else its zone's, else the
   default);
2. liveness of each identity from its Lease, judged by the operator's own clock since it last saw
   the Lease change (`LeaseClock`, as leader election does: clocks of two machines are never
   compared; a heartbeat it granted counts as a change, docs/design.md §7.5): `live` (held and
   changed within the lease duration), `expired` (held, silent longer, or `exited`: its pod's
   status shows the holder's container gone, `planner/exits.py`),
   `absent` (no Lease, or nobody ever took it: the pod has not started its consumer);
3. draining: identities whose partitions must be handed away before their pod goes: every pod at
   ordinal >= n (scale-down removes the highest ordinals), and during a template change the one
   stale pod with the lowest ordinal (pods are replaced one at a time);
4. members (take part in the plan): slots not draining and not expired; when at least one of them
   is live, only the live ones (a replica joins the plan when its consumer runs, as a Kafka member
   joins when it polls) and the starting ones the plan already gives partitions (a Lease nobody
   has taken yet, for at most `startup_grace` after the operator first saw it: replicas of a new
   policy start seconds apart, and the first to start must not take the partitions of the
   others); when none is live yet (a new policy, or no node runs the pods), all of them, so the
   first plan is ready when they start;
5. releasable: draining identities that own nothing any more: the published plan gives them no
   partition and waits for no release from them, and their Lease is not live or reports no
   partition owned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groupops.controller.lease_records import LEASE_RECORDS
from groupops.controller.names import LABEL_ORDINAL, LABEL_TEMPLATE_HASH, LABEL_ZONE
from groupops.controller.render_pods import CONSUMER_CONTAINER
from groupops.model import MemberId, TopicPartition
from groupops.planner.exits import holder_exited
from groupops.planner.handoff import LeaseClock
from groupops.planner.plan_format import LeaseRecord
from groupops.planner.target import Identity, default_priority
from groupops.planner.wire import LeaseNote, PlanFormatError, identity_name

__all__ = [
    "IdentityView",
    "LeaseClock",
    "LeaseState",
    "PodView",
    "identity_view",
    "observe_lease",
    "pod_ordinals",
    "pod_ready",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseState:
    identity: str
    held: bool
    live: bool
    note: LeaseNote
    silent_for: float = 0.0
    """Seconds since this operator saw the Lease change (0 for a missing Lease)."""
    stopped: tuple[tuple[TopicPartition, int], ...] = ()
    """Partitions its replica stopped on a failing message, with that offset (design §9.2)."""
    errors: tuple[tuple[str, int], ...] = ()
    """Its replica's counts of skipped, dead-lettered messages and uncommitted releases."""
    exited: bool = False
    """Held by a process its pod's status shows gone (`planner.exits.holder_exited`): void now,
    without waiting for silence."""

    @property
    def never_taken(self) -> bool:
        """Nobody holds it and no consumer ever reported on it (a consumer that released it
        leaves its acknowledged epoch)."""
        return not self.held and self.note.epoch is None

    @property
    def expired(self) -> bool:
        return self.held and not self.live


@dataclass(frozen=True, slots=True, kw_only=True)
class PodView:
    name: str
    ordinal: int
    template_hash: str
    ready: bool
    terminating: bool
    service_account: str = ""
    zone: str | None = None
    """Its `groupops.dev/zone` label (None: none, e.g. rendered before the label existed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IdentityView:
    slots: tuple[tuple[int, str, str | None], ...]
    pods: Mapping[int, PodView]
    leases: Mapping[str, LeaseState]
    draining: frozenset[str]
    members: tuple[Identity, ...]
    releasable: frozenset[str]
    identities_by_ordinal: Mapping[int, str] = field(default_factory=dict)

    @property
    def ready(self) -> int:
        return sum(1 for pod in self.pods.values() if pod.ready and not pod.terminating)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _pods_by_ordinal(pods: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    by_ordinal: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        raw = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ORDINAL, "")
        if str(raw).isdigit():  # else not one of ours (a label was removed by hand): left alone
            by_ordinal[int(raw)] = pod
    return by_ordinal


def _pod_views(pods: Iterable[Mapping[str, Any]]) -> dict[int, PodView]:
    views: dict[int, PodView] = {}
    for ordinal, pod in _pods_by_ordinal(pods).items():
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        views[ordinal] = PodView(
            name=str(meta.get("name")),
            ordinal=ordinal,
            template_hash=str(labels.get(LABEL_TEMPLATE_HASH, "")),
            ready=pod_ready(pod),
            terminating=meta.get("deletionTimestamp") is not None,
            service_account=str((pod.get("spec") or {}).get("serviceAccountName") or ""),
            zone=labels.get(LABEL_ZONE) or None,
        )
    return views


def pod_ordinals(pods: Iterable[Mapping[str, Any]]) -> set[int]:
    return set(_pod_views(pods))


def observe_lease(
    lease: Mapping[str, Any], *, clock: LeaseClock, now: float, duration: float
) -> tuple[bool, float, float]:
    """Note a Lease object on `clock` (keyed by the Lease's name, with its duration as lifetime
    while held); returns (held, duration in seconds, when the clock first saw this version)."""
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    held = bool(spec.get("holderIdentity"))
    seconds = float(spec.get("leaseDurationSeconds") or duration)
    version = str(spec.get("renewTime") or meta.get("resourceVersion") or "")
    changed_at = clock.observe(
        MemberId(str(meta.get("name"))), version, now, lifetime=seconds if held else None
    )
    return held, seconds, changed_at


def lease_state(
    identity: str,
    lease: Mapping[str, Any] | None,
    *,
    clock: LeaseClock,
    now: float,
    duration: float,
    pod: Mapping[str, Any] | None = None,
) -> LeaseState:
    """`pod`: the identity's pod as last read, whose status may show the holder gone."""
    if lease is None:
        return LeaseState(
            identity=identity, held=False, live=False, note=LeaseNote(epoch=None, partitions=())
        )
    meta = lease.get("metadata") or {}
    held, seconds, changed_at = observe_lease(lease, clock=clock, now=now, duration=duration)
    try:
        notes = LEASE_RECORDS.of(lease)
    except PlanFormatError:
        notes = LeaseRecord()
    note = LeaseNote(epoch=notes.acked_epoch, partitions=notes.partitions)
    silent_for = clock.unchanged_for(MemberId(str(meta.get("name"))), now)
    silent = now - changed_at if silent_for is None else silent_for
    exited = held and holder_exited(lease, pod, container=CONSUMER_CONTAINER, incarnation=notes.incarnation)
    return LeaseState(
        identity=identity,
        held=held,
        live=held and silent <= seconds and not exited,
        exited=exited,
        note=note,
        silent_for=silent,
        stopped=notes.stopped if held else (),
        errors=notes.errors,
    )


def identity_view(
    *,
    group_id: str,
    replicas: int,
    zones: Sequence[str],
    priorities: Mapping[str, int],
    capacity: Callable[[str, str | None], float] = lambda identity, zone: 1.0,
    template_hash: str,
    pods: Iterable[Mapping[str, Any]],
    leases: Mapping[str, Mapping[str, Any] | None],
    published: Mapping[Any, Sequence[Any]] | None,
    releasing_from: frozenset[str] = frozenset(),
    clock: LeaseClock,
    now: float,
    lease_duration: float,
    startup_grace: float = 0.0,
) -> IdentityView:
    """See the module docstring; `leases` maps identity -> its Lease object (or None);
    `capacity(identity, zone)` is the replica's capacity (`CapacitySpec.of`)."""
    pods = list(pods)
    views = _pod_views(pods)
    raw_pods = _pods_by_ordinal(pods)
    slots = tuple(
        (i, identity_name(group_id, i), zones[i % len(zones)] if zones else None) for i in range(replicas)
    )
    ordinals = sorted(set(range(replicas)) | set(views))
    names = {i: identity_name(group_id, i) for i in ordinals}
    states = {
        names[i]: lease_state(
            names[i],
            leases.get(names[i]),
            clock=clock,
            now=now,
            duration=lease_duration,
            pod=raw_pods.get(i),
        )
        for i in ordinals
    }
    draining = {names[i] for i in views if i >= replicas}
    zone_of = {i: zone for i, _, zone in slots}
    stale = sorted(
        i
        for i, pod in views.items()
        if i < replicas
        and (pod.template_hash != template_hash or (pod.zone is not None and pod.zone != zone_of[i]))
    )
    if stale and not any(views[i].terminating for i in views if i < replicas):
        draining.add(names[stale[0]])
    candidates = [
        (i, name, zone) for i, name, zone in slots if name not in draining and not states[name].expired
    ]
    plan = published or {}
    if any(states[name].live for _, name, _ in candidates):

        def starting(name: str) -> bool:
            state = states[name]
            return state.never_taken and state.silent_for < startup_grace and bool(plan.get(name))

        candidates = [(i, name, zone) for i, name, zone in candidates if states[name].live or starting(name)]
    members = tuple(
        Identity(
            name=name,
            ordinal=i,
            priority=priorities.get(name, default_priority(i)),
            rack=zone,
            capacity=capacity(name, zone),
        )
        for i, name, zone in candidates
    )
    releasable = frozenset(
        name
        for name in draining
        if not plan.get(name)
        and name not in releasing_from
        and (not states[name].live or not states[name].note.partitions)
    )
    return IdentityView(
        slots=slots,
        pods=views,
        leases=states,
        draining=frozenset(draining),
        members=members,
        releasable=releasable,
        identities_by_ordinal=names,
    )
