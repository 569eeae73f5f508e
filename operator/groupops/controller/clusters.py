"""ConsumerGroupClusters: what policies take from the cluster they name, the disruption budget
shared by every policy on it, and the fleet's status.

Stage: controller (I/O). `main.run_operator` builds one `ClusterBook` per operator process and
starts its watch with the other caches (a standby knows every cluster before it leads), and its
status reports once it leads. The reconcile calls `resolve` in its spec step, `request` in the
plan step (`decide`, for a rebalance the policy chose), `note_plan` after publishing and
`note_figures` with the status it wrote; `handlers` follows `add_listener` to wake policies when
their cluster changes or the budget frees up (docs/design.md §15).

    resolve(policy)        clusterRef -> bootstrap servers, merged properties, operator Secret;
                           ClusterRefusal: ClusterNotFound, ClusterInvalid, ClusterNotAllowed
    request(...)           planner.budget.DisruptionBudget.request under the book's lock
    note_plan(...)         in flight while the published plan has partitions releasing; moves spent
    report_once()          every cluster's status from its policies' figures, patched on change

One watch of the kind, cluster-wide (the kind is cluster-scoped), with the fallback of the other
caches: while it is not synced a lookup GETs the cluster from the API, counted as a cache fallback.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from groupops.controller.cache import WatchCache
from groupops.controller.cluster_spec import ClusterSpec, normalise_servers, parse_cluster
from groupops.controller.context import iso
from groupops.controller.metrics import Metrics
from groupops.controller.names import API_GROUP, API_VERSION
from groupops.controller.spec import PolicySpec, SpecError
from groupops.controller.status import Condition, merge_conditions
from groupops.kubeapi import KubeClient, KubeError
from groupops.planner.budget import BudgetLimits, DisruptionBudget, Verdict

__all__ = [
    "CLUSTER_KIND",
    "ClusterBook",
    "ClusterRefusal",
    "badness_of",
]

log = logging.getLogger(__name__)

CLUSTER_KIND = "ConsumerGroupCluster"
_API_VERSION = f"{API_GROUP}/{API_VERSION}"

PolicyKey = tuple[str, str]
WakeListener = Callable[[frozenset[PolicyKey]], None]

STATUS_PERIOD_S = 5.0
"""How often the leader recomputes every cluster's status (a patch only when it changed)."""


class ClusterRefusal(Exception):
    """A policy's clusterRef cannot be used: `reason` is its Ready condition's reason."""

    def __init__(self, reason: str, message: str, *, transient: bool) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.transient = transient


@dataclass(frozen=True, slots=True)
class _Entry:
    """A cluster as last seen: its parsed spec, or why it does not parse."""

    spec: ClusterSpec | None
    problem: str | None
    generation: int | None


@dataclass(frozen=True, slots=True)
class _Figures:
    """What the fleet status reads of one policy's status."""

    group_id: str
    total_lag: int
    imbalance: float
    time_lag: float | None
    goal: float | None


def badness_of(imbalance: float, time_lag: float | None, goal: float | None) -> float:
    """How far a group is from its goal: its time lag over its goal when it has one and a time
    lag, never less than its imbalance (1.0: balanced and on time)."""
    if goal and time_lag is not None:
        return max(imbalance, time_lag / goal)
    return imbalance


class ClusterBook:
    """Every ConsumerGroupCluster, its budget and its policies' figures. Thread-safe."""

    def __init__(
        self,
        client: KubeClient,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        stale_after: float = 30.0,
        learning_s: float = 0.0,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._clock = clock
        self._stale_after = stale_after
        self._learning_s = learning_s
        self._learning_until = 0.0
        """No grant before this (planner/budget.py rule 5): set when this process starts leading."""
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._budgets: dict[str, DisruptionBudget] = {}
        self._members: dict[PolicyKey, str] = {}
        self._figures: dict[PolicyKey, _Figures] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self._listeners: list[WakeListener] = []
        self._watch = WatchCache(client, _API_VERSION, CLUSTER_KIND)
        self._watch.add_listener(self.note)
        self._reporting: threading.Thread | None = None
        self._stopped = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._watch.start()

    def wait_synced(self, timeout: float) -> bool:
        return self._watch.wait_synced(timeout)

    def start_reporting(self, period: float = STATUS_PERIOD_S) -> None:
        """Write every cluster's status every `period` seconds (the leader only), and grant
        nothing for `learning_s` from now, while the policies' first runs say what is in flight."""
        with self._lock:
            self._learning_until = self._clock() + self._learning_s
            for budget in self._budgets.values():
                budget.learning_until = self._learning_until

        def loop() -> None:
            while not self._stopped.wait(period):
                try:
                    self.report_once()
                except Exception:
                    log.exception("fleet status report failed")

        self._reporting = threading.Thread(target=loop, name="fleet-status", daemon=True)
        self._reporting.start()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop(join=0.0)

    def add_listener(self, listener: WakeListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: WakeListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    # -- resolve ---------------------------------------------------------------------------------

    def resolve(self, key: PolicyKey, spec: PolicySpec) -> PolicySpec:
        """`spec` with its clusterRef resolved: the cluster's brokers, its properties under the
        policy's own, and the operator's Secret. ClusterRefusal when it cannot be used."""
        name = spec.kafka.cluster_ref
        with self._lock:
            before = self._members.pop(key, None)
            if name is not None:
                self._members[key] = name
        if before is not None and before != name:
            self.forget(key, cluster=before)
        if name is None:
            return spec
        entry = self._entry(name)
        where = f"ConsumerGroupCluster {name!r} (spec.kafka.clusterRef.name)"
        if entry is None:
            raise ClusterRefusal("ClusterNotFound", f"{where} does not exist", transient=False)
        if entry.spec is None:
            raise ClusterRefusal("ClusterInvalid", f"{where} is invalid: {entry.problem}", transient=False)
        if not entry.spec.allows(key[0]):
            raise ClusterRefusal(
                "ClusterNotAllowed",
                f"{where} does not list namespace {key[0]!r} in spec.allowedNamespaces",
                transient=False,
            )
        cluster = entry.spec
        kafka = replace(
            spec.kafka,
            bootstrap_servers=cluster.bootstrap_servers,
            properties={**cluster.properties, **spec.kafka.properties},
            operator_auth=cluster.operator_auth,
        )
        return replace(spec, kafka=kafka)

    def servers_of(self, name: str) -> frozenset[str]:
        """The normalised bootstrap servers of cluster `name` as last seen by the watch (empty:
        unknown or invalid); the conflict rule's view of a clusterRef (conflicts.py rule 2)."""
        with self._lock:
            entry = self._entries.get(name)
        if entry is None or entry.spec is None:
            return frozenset()
        return normalise_servers(entry.spec.bootstrap_servers)

    def policy_defaults_of(self, name: str) -> Mapping[str, Any]:
        """spec.policyDefaults of cluster `name` (empty: none, or the cluster is missing, invalid
        or unreadable, which `resolve` then refuses with its reason)."""
        try:
            entry = self._entry(name)
        except ClusterRefusal:
            return {}
        return {} if entry is None or entry.spec is None else entry.spec.policy_defaults

    def cluster_of(self, key: PolicyKey) -> str | None:
        with self._lock:
            return self._members.get(key)

    # -- the budget ------------------------------------------------------------------------------

    def request(self, cluster: str, key: PolicyKey, *, moves: int, badness: float) -> Verdict:
        """May `key` publish a rebalance it chose that moves `moves` partitions now?"""
        with self._lock:
            return self._budget(cluster).request(key, moves=moves, badness=badness, now=self._clock())

    def note_plan(self, cluster: str, key: PolicyKey, *, in_flight: bool, moves: int) -> None:
        """After a run's publish step: `moves` partitions the new plan moved (0 when unchanged);
        `in_flight` while its plan still has partitions releasing."""
        now = self._clock()
        with self._lock:
            budget = self._budget(cluster)
            budget.note_moves(moves, now=now, key=key)
            if in_flight:
                budget.note_in_flight(key, now=now)
                return
            freed = budget.settle(key)
            waiting = frozenset(budget.next_up(now=now)) if freed else frozenset()
        self._wake(waiting)

    def forget(self, key: PolicyKey, *, cluster: str | None = None) -> None:
        """`key` left `cluster` (deleted, another cluster, standing down): its handoff, its place
        in the queue and its figures go."""
        with self._lock:
            name = cluster or self._members.pop(key, None)
            self._figures.pop(key, None)
            budget = self._budgets.get(name) if name else None
            freed = budget is not None and budget.forget(key)
            waiting = frozenset(budget.next_up(now=self._clock())) if budget and freed else frozenset()
        self._wake(waiting)

    # -- figures and status ----------------------------------------------------------------------

    def note_figures(self, key: PolicyKey, *, group_id: str, status: Mapping[str, Any]) -> None:
        """The status a run of `key` just computed (written or unchanged)."""
        time_lag = status.get("timeLagSeconds")
        goal = (status.get("timeLagGoal") or {}).get("targetSeconds")
        figures = _Figures(
            group_id=group_id,
            total_lag=int(status.get("totalLag") or 0),
            imbalance=float(status.get("imbalance") or 1.0),
            time_lag=float(time_lag) if isinstance(time_lag, (int, float)) else None,
            goal=float(goal) if isinstance(goal, (int, float)) else None,
        )
        with self._lock:
            self._figures[key] = figures

    def status_of(self, name: str) -> dict[str, Any]:
        """The status the cluster's object should have now."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(name)
            keys = sorted(k for k, c in self._members.items() if c == name)
            figures = {k: self._figures[k] for k in keys if k in self._figures}
            budget = self._budget(name)
            use = budget.use(now=now)
        imbalances = sorted(f.imbalance for f in figures.values())
        time_lags = [f.time_lag for f in figures.values() if f.time_lag is not None]
        worst = max(
            figures,
            key=lambda k: (badness_of(figures[k].imbalance, figures[k].time_lag, figures[k].goal), k),
            default=None,
        )
        status: dict[str, Any] = {
            "observedGeneration": None if entry is None else entry.generation,
            "policies": len(keys),
            "groups": len({f.group_id for f in figures.values()}),
            "totalLag": sum(f.total_lag for f in figures.values()),
            "worstTimeLagSeconds": round(max(time_lags), 3) if time_lags else None,
            "worstPolicy": None if worst is None else f"{worst[0]}/{worst[1]}",
            "imbalance": None
            if not imbalances
            else {
                "p50": round(statistics.median(imbalances), 3),
                "p90": round(_percentile(imbalances, 0.9), 3),
                "max": round(imbalances[-1], 3),
            },
            "handoffsInFlight": use.in_flight,
            "partitionsMovedLastMinute": use.moved_last_minute,
            "waitingForBudget": use.waiting,
            "budgetUsed": _budget_used(use.limits, use.in_flight, use.moved_last_minute),
        }
        if self._metrics is not None:
            self._metrics.record_cluster(name, in_flight=use.in_flight, waiting=use.waiting)
        return status

    def report_once(self) -> int:
        """Patch every cluster's status that changed; wake waiters the minute's window freed.
        Returns the number of patches written."""
        with self._lock:
            names = sorted(self._entries)
        written = 0
        for name in names:
            status = self.status_of(name)
            with self._lock:
                entry = self._entries.get(name)
                previous = self._written.get(name)
            if entry is None:
                continue
            ready = (
                Condition("Ready", True, "Reporting", f"{status['policies']} policies on this cluster")
                if entry.spec is not None
                else Condition("Ready", False, "InvalidSpec", entry.problem or "")
            )
            before = (previous or {}).get("conditions")
            status["conditions"] = merge_conditions(
                before, [ready], generation=entry.generation or 0, now=iso(datetime.now(UTC))
            )
            if previous == status:
                continue
            try:
                self._client.patch(
                    _API_VERSION, CLUSTER_KIND, None, name, {"status": status}, subresource="status"
                )
            except KubeError as e:
                log.warning("status of ConsumerGroupCluster %s not written: %s", name, e)
                continue
            with self._lock:
                self._written[name] = status
            written += 1
        self._wake_waiters()
        return written

    # -- internals -------------------------------------------------------------------------------

    def _entry(self, name: str) -> _Entry | None:
        if self._watch.synced():
            with self._lock:
                return self._entries.get(name)
        if self._metrics is not None:
            self._metrics.cache_fallbacks.labels(CLUSTER_KIND).inc()
        try:
            body = self._client.get(_API_VERSION, CLUSTER_KIND, None, name)
        except KubeError as e:
            raise ClusterRefusal(
                "ClusterUnavailable", f"cannot read ConsumerGroupCluster {name!r}: {e}", transient=True
            ) from e
        entry = None if body is None else _entry_of(body)
        with self._lock:  # what the budget and the status read until the watch's events come
            if entry is None:
                self._entries.pop(name, None)
            else:
                self._entries[name] = entry
        return entry

    def _budget(self, name: str) -> DisruptionBudget:
        """The budget of `name` (no limits when its spec sets none); the lock is held."""
        entry = self._entries.get(name)
        limits = (
            entry.spec.budget if entry is not None and entry.spec is not None else None
        ) or BudgetLimits()
        budget = self._budgets.get(name)
        if budget is None:
            budget = self._budgets[name] = DisruptionBudget(
                limits, stale_after=self._stale_after, learning_until=self._learning_until
            )
        elif budget.limits != limits:
            budget.limits = limits
        return budget

    def note(self, event_type: str, body: Mapping[str, Any]) -> None:
        """A cluster event of the watch: keep its spec, wake the policies that name it."""
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._lock:
            if event_type == "DELETED":
                self._entries.pop(name, None)
                self._written.pop(name, None)
                self._budgets.pop(name, None)
                if self._metrics is not None:
                    self._metrics.forget_cluster(name)
            else:
                old = self._entries.get(name)
                new = _entry_of(body)
                if old is not None and (old.spec, old.problem) == (new.spec, new.problem):
                    self._entries[name] = new
                    return  # a status write or a metadata change: nobody's spec changed
                self._entries[name] = new
            keys = frozenset(k for k, c in self._members.items() if c == name)
        self._wake(keys)

    def _wake_waiters(self) -> None:
        now = self._clock()
        with self._lock:
            keys = frozenset(k for budget in self._budgets.values() for k in budget.next_up(now=now))
        self._wake(keys)

    def _wake(self, keys: frozenset[PolicyKey]) -> None:
        if not keys:
            return
        with self._lock:
            listeners = tuple(self._listeners)
        for listener in listeners:
            try:
                listener(keys)
            except Exception:
                log.exception("listener %r failed on %s", listener, sorted(keys))


def _entry_of(body: Mapping[str, Any]) -> _Entry:
    generation = (body.get("metadata") or {}).get("generation")
    try:
        return _Entry(parse_cluster(body.get("spec")), None, generation)
    except SpecError as e:
        return _Entry(None, str(e), generation)


def _percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of an ascending list."""
    index = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def _budget_used(limits: BudgetLimits, in_flight: int, moved: int) -> dict[str, str] | None:
    used = {}
    if limits.max_handoffs is not None:
        used["handoffs"] = f"{in_flight}/{limits.max_handoffs}"
    if limits.max_partitions_per_minute is not None:
        used["partitionsPerMinute"] = f"{moved}/{limits.max_partitions_per_minute}"
    return used or None
