"""The kopf handlers: thin. Each policy has one loop (`policy_loop`) that takes the policy's lock,
runs `reconcile`, and translates its outcome into a retry delay; nothing here decides anything
about plans or objects.

    a policy's watch event    -> start its loop if none runs (the first run is at once); wake it
                                 when its generation, labels or annotations changed; stop it and
                                 remove what it owns when the policy is gone
    the loop (one per policy) -> reconcile every tick (lag, liveness, the rebalance interval), and
                                 between ticks when the policy changed, when a Lease of the policy
                                 changed what the plan depends on or a held Lease ran out (`wakeup`)
    a policy's Lease changed  -> note it on the policy's LeaseClock; wake its loop if needed
                                 (a listener of the Lease watch cache, `cache`: kopf does not
                                 watch Leases, so the operator never receives other Leases)
    a policy's claim changed  -> wake the policies whose first rival for their group changed
                                 (a listener of `conflicts.PolicyClaims`): the later of two
                                 policies runs as soon as the first is deleted or moves away

The operator writes nothing into a policy but its status (docs/design.md §13.1): no kopf change
handlers (their diff base and progress would live in the policy), no kopf daemon (kopf puts a
finalizer on every object a daemon runs for). A policy deleted while the operator runs has what it
owns removed at once; otherwise the owner references leave it to Kubernetes' garbage collector. A
finalizer of an earlier version (`groupops.dev/finalizer`) is lifted by kopf, which no longer
needs it.

Failures: `ReconcileFailure(transient=True)` -> the loop waits a doubling delay (each attempt
logged with its number); otherwise the next tick (status already says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf

from groupops.controller.cache import Listener
from groupops.controller.conflicts import PolicyKey, WakeListener
from groupops.controller.identities import observe_lease
from groupops.controller.lanes import Lanes, urgent_cause
from groupops.controller.lease_records import LEASE_RECORDS
from groupops.controller.names import API_GROUP, API_VERSION, LABEL_POLICY, PLURAL, owned_selector
from groupops.controller.priority_pool import PriorityExecutor
from groupops.controller.reconcile import (
    LAG_WAIT_S,
    Deps,
    PolicyMemory,
    ReconcileFailure,
    SettledCheck,
    TakenLag,
    begin_settled_check,
    finish_settled_check,
    reconcile,
)
from groupops.controller.sightings import hear_heartbeat_leases
from groupops.controller.supervise import on_crash
from groupops.controller.sweep import SettledSweep
from groupops.controller.wakeup import exited_recently, expiry_alarm, expiry_due, next_wake
from groupops.kubeapi import KubeError

__all__ = ["OWNED_KINDS", "build_registry", "delete_owned"]

log = logging.getLogger(__name__)

OWNED_KINDS = (
    ("v1", "Pod"),
    ("coordination.k8s.io/v1", "Lease"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
)
"""Deletion order: consumers first, then what they read, then their permissions."""

_LOCK_WAIT_S = 60.0
_LOOP_STOP_S = 5.0
_LOOPS_PER_YIELD = 50
"""Loops a new leader starts before it lets kopf's loop run the ones started (`start_known_loops`)."""


def _plain(value: Any) -> Any:
    """kopf hands out read-only views; the reconcile works on plain dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _new_memory(deps: Deps, namespace: str, name: str) -> PolicyMemory:
    """A policy's memory. It starts from this process's sightings of its Leases (a standby that
    just took over judges expiry from what it watched while standing by), counts every Lease in
    heartbeat mode as heard when this process began to lead (heartbeats the previous leader
    granted were answered before that: docs/design.md §7.5, rule 2), and from now on receives the
    heartbeats this process grants. So a loop that kopf starts late in a big fleet's start still
    judges a replica that died with the old leader one Lease duration after the takeover."""
    memory = PolicyMemory()
    if deps.sightings is not None:
        deps.sightings.seed(memory.clock, namespace, name)
    if deps.heartbeats is not None:
        leases = deps.reader.list(
            "coordination.k8s.io/v1", "Lease", namespace, label_selector=f"{LABEL_POLICY}={name}"
        )
        leading_since = deps.leading_since if deps.leading_since is not None else time.monotonic()
        hear_heartbeat_leases(memory.clock, leases, at=leading_since)
        deps.heartbeats.attach(namespace, name, memory.clock)
    return memory


def delete_owned(deps: Deps, namespace: str, policy: str) -> int:
    """Delete every object labelled as the policy's; returns how many were deleted."""
    deleted = 0
    for api_version, kind in OWNED_KINDS:
        for item in deps.client.list(api_version, kind, namespace, label_selector=owned_selector(policy)):
            if deps.client.delete(api_version, kind, namespace, item["metadata"]["name"]):
                deleted += 1
    return deleted


_LOOP_LAG_SAMPLE_S = 0.5
_LOOP_RESTART_S = 1.0
"""How long after its loop ended by an error a policy's loop starts again: a bug that ends every
start does not spin."""


def build_registry(deps: Deps) -> kopf.OperatorRegistry:
    """A registry with every handler of the operator, bound to `deps`."""
    registry = kopf.OperatorRegistry()
    settings = deps.settings
    resource = (API_GROUP, API_VERSION, PLURAL)

    @kopf.on.startup(registry=registry)
    def configure(*, settings: kopf.OperatorSettings, **_: Any) -> None:
        # Where kopf would keep bookkeeping if a handler ever needed it: the old finalizer's name
        # (kopf lifts it from policies of earlier versions) and status, never annotations.
        settings.persistence.finalizer = "groupops.dev/finalizer"
        settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
        settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(
            field="status.kopf.last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # our Events say what happened; kopf's would repeat it
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    urgent_pool = PriorityExecutor(settings.reconcile.urgent_workers, thread_name_prefix="reconcile-urgent")
    # The tick's runs yield to a waiting urgent run, for one tick at most (design §8.3).
    pool = PriorityExecutor(
        settings.reconcile.workers,
        thread_name_prefix="reconcile",
        defer_while=urgent_pool.backlogged,
        max_deferral_s=settings.reconcile.tick_seconds,
    )
    lanes = Lanes(
        routine=pool,
        urgent=urgent_pool,
        waited=lambda lane, cause, seconds: deps.metrics.run_wait_seconds.labels(lane, cause).observe(
            seconds
        ),
    )
    sweep: SettledSweep[PolicyMemory, SettledCheck, TakenLag] = SettledSweep(
        tick_s=settings.reconcile.tick_seconds,
        executor=ThreadPoolExecutor(max_workers=1, thread_name_prefix="settled-sweep"),
        begin=lambda body, memory: begin_settled_check(body, deps, memory),
        finish=finish_settled_check,
        wait_s=LAG_WAIT_S,
        on_round=deps.metrics.record_settled_round,
    )
    loops: dict[tuple[str, str], _PolicyLoop] = {}
    """The loop of every policy the operator knows, for the watches to reach."""

    def reconcile_locked(body: dict[str, Any], memory: PolicyMemory, pretaken: TakenLag | None) -> bool:
        """One reconcile under the policy's lock (waiting for a run in progress); False when the
        lock did not come. ReconcileFailure passes through to the caller. `body`: the loop's plain
        copy of the policy, replaced and never changed by the watch (the reconcile copies it)."""
        if not memory.lock.acquire(timeout=_LOCK_WAIT_S):
            return False
        try:
            result = reconcile(body, deps, memory, pretaken=pretaken)
        finally:
            memory.lock.release()
        memory.failures = 0
        if result.published:
            log.info("%s: epoch %d published (%s)", _name(body), result.epoch, result.trigger)
        return True

    def run_in_loop(
        body: dict[str, Any], memory: PolicyMemory, pretaken: TakenLag | None = None
    ) -> float | None:
        """One reconcile (in a worker thread): returns a retry delay after a transient failure,
        else None. Never raises: the loop must outlive every failure. `pretaken`: the lag the
        settled sweep read and found changed (docs/design.md §8.3)."""
        try:
            if not reconcile_locked(body, memory, pretaken):
                return 1.0  # another run of this policy holds the lock
        except ReconcileFailure as failure:
            if not failure.transient:
                return None  # status says why; the next tick tries again
            memory.failures += 1
            delay = settings.reconcile.backoff(memory.failures)
            log.info("retry %d of %s in %.0fs: %s", memory.failures, _name(body), delay, failure)
            return delay
        except Exception:
            log.exception("%s: reconcile failed", _name(body))
            return settings.reconcile.backoff(1)
        return None

    async def policy_loop(entry: _PolicyLoop) -> None:
        memory = entry.memory
        loop = asyncio.get_running_loop()

        def poke() -> None:  # from another thread
            loop.call_soon_threadsafe(memory.wakeup.poke)

        def lag_landed() -> None:  # from the lag pool: a read landed after its run stopped waiting
            loop.call_soon_threadsafe(memory.wakeup.note_lag_landed)

        memory.poke = poke
        memory.lag_landed = lag_landed
        landed = memory.wakeup.lag_landed

        judged_at: list[float] = []  # how far the latest run could judge expiries as it started

        def judging() -> None:
            judged_at.append(memory.clock.judged_through(time.monotonic()))

        def run() -> float | None:
            # The body as it is when the run starts, in whichever lane: a routine run promoted
            # by a spec change must reconcile the new spec, not the one it was queued with.
            judging()
            return run_in_loop(entry.body, memory)

        tick = settings.reconcile.tick_seconds
        next_tick = time.monotonic()  # a policy just seen is reconciled at once
        judged_until = time.monotonic()
        stopping = asyncio.ensure_future(entry.stopped.wait())  # ends a wait at once on stop
        try:
            while not entry.stopped.is_set():
                pretaken: TakenLag | None = None
                settled = memory.settled
                lag_news = asyncio.ensure_future(landed.wait())  # asks for a routine run, not urgent
                if settled is not None:
                    # Parked: the sweep checks it at its ticks; the loop wakes for a change the
                    # sweep found, a wake-up, an expiry that is due, or the resync (§8.3).
                    changed = sweep.park(entry.key, lambda: entry.body, memory, next_check=next_tick)
                    alarm = expiry_alarm(memory.clock, judged_until=judged_until)
                    woken = await memory.wakeup.wait_until(
                        settled.until, interrupts=(stopping, changed, lag_news, alarm)
                    )
                    alarm.cancel()
                    paced = sweep.unpark(entry.key)
                    if paced is not None:  # a loop that parks again keeps its policy's pace
                        next_tick = paced
                    now = time.monotonic()
                    found = changed.done() and not changed.cancelled()
                    if found:
                        pretaken = changed.result().lag
                    if landed.is_set() and settled.by_counts is not None:
                        # The sweep's next check compares that read's shape (a read lands in the
                        # policy's memory, and the next check plans on the newest): a busy group's
                        # late reads would otherwise run it in full at every tick.
                        landed.clear()
                    due = found or now >= settled.until or landed.is_set()
                else:
                    wake_at = next_wake(
                        now=time.monotonic(),
                        next_tick=next_tick,
                        clock=memory.clock,
                        judged_until=judged_until,
                    )
                    woken = await memory.wakeup.wait_until(wake_at, interrupts=(stopping, lag_news))
                    now = time.monotonic()
                    due = now >= next_tick or landed.is_set()
                lag_news.cancel()
                if entry.stopped.is_set():
                    break
                expired = expiry_due(now=now, clock=memory.clock, judged_until=judged_until)
                urgent = woken or expired
                if not (urgent or due):
                    continue  # the Lease we woke for was renewed meanwhile
                landed.clear()  # the run about to start reads lag afresh
                # A run something woke (a Lease changed or expired, the spec changed) skips the
                # queue of the tick's routine runs, and so does a routine run still queued when
                # such a thing comes: failover must not wait for the tick (§8.3).

                def tick_run(taken: TakenLag | None = pretaken) -> float | None:
                    judging()
                    return run_in_loop(entry.body, memory, taken)

                ran = await (
                    lanes.run_urgent(run, cause=urgent_cause(memory.wakeup, expired=expired))
                    if urgent
                    else lanes.run_routine(
                        tick_run, wakeup=memory.wakeup, clock=memory.clock, stopping=stopping, promoted=run
                    )
                )
                if ran is None:
                    break  # stopped before it ran
                # An expiry the answering process had not reported up to when the run started
                # was not judged by it: the loop judges it once the report is in (§7.5).
                judged_until = judged_at[-1] if judged_at else ran.started
                judged_at.clear()
                next_tick = time.monotonic() + (ran.result if ran.result is not None else tick)
        finally:
            sweep.unpark(entry.key)
            stopping.cancel()
            if deps.heartbeats is not None:
                deps.heartbeats.detach(*entry.key, memory.clock)

    async def stop(entry: _PolicyLoop) -> None:
        entry.stopped.set()
        if entry.task is not None:
            # Exception: a loop that ended by an error was reported then (`on_crash`).
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(entry.task), timeout=_LOOP_STOP_S)
            if not entry.task.done():
                entry.task.cancel()

    def start_loop(
        key: tuple[str, str],
        body: dict[str, Any],
        pods: list[dict[str, Any]] | None = None,
        *,
        memory: PolicyMemory | None = None,
    ) -> None:
        """A policy's loop, started (in kopf's loop). Its first run is at once; an urgent one when
        a consumer container of the policy started or ended just before (a crash the previous
        leader left: `Wakeup.note_pods_at_start`, design §8.3). `pods`: the policy's, when the
        caller has them. `memory`: the one its previous loop ended with (that loop ended by an
        error), attached to the heartbeats again; else a new one."""
        if memory is None:
            memory = _new_memory(deps, *key)
        elif deps.heartbeats is not None:
            deps.heartbeats.attach(*key, memory.clock)
        entry = _PolicyLoop(key=key, body=body, memory=memory)
        loops[key] = entry
        if pods is None and deps.caches is not None and deps.caches.pods.synced():
            pods = deps.caches.pods.list(key[0], owned_selector(key[1]))
        if pods is not None:
            entry.memory.wakeup.note_pods_at_start(pods, now=time.time())
        entry.task = asyncio.create_task(policy_loop(entry), name=f"policy {key[0]}/{key[1]}")

        def crashed(error: BaseException) -> None:
            log.error(
                "the loop of %s/%s ended by an error; it starts again in %.0f s",
                *key,
                _LOOP_RESTART_S,
                exc_info=error,
            )
            asyncio.get_running_loop().call_later(_LOOP_RESTART_S, again)

        def again() -> None:
            if loops.get(key) is entry and not entry.stopped.is_set():
                start_loop(key, entry.body, memory=entry.memory)

        on_crash(entry.task, crashed)

    @kopf.on.startup(registry=registry)
    async def start_known_loops(**_: Any) -> None:
        """A new leader starts every policy's loop from the policies it watched while standing by,
        at once, rather than at the pace kopf lists them (about 60 a second at 1,000 policies):
        kopf's events then find the loops running. Policies with a recent container exit first,
        and kopf's loop is let go every few loops, so that their urgent runs start at once
        (design §8.3)."""
        known = [] if deps.claims is None else deps.claims.known_policies()
        if not known:
            return
        by_policy: dict[tuple[str, str], list[dict[str, Any]]] | None = None
        if deps.caches is not None and deps.caches.pods.synced():
            by_policy = {}
            for pod in deps.caches.pods.list(None):
                meta = pod.get("metadata") or {}
                owner = (str(meta.get("namespace")), str((meta.get("labels") or {}).get(LABEL_POLICY)))
                by_policy.setdefault(owner, []).append(pod)
        now = time.time()

        def later(body: dict[str, Any]) -> bool:
            return by_policy is None or not exited_recently(by_policy.get(_key(body), []), now=now)

        started = 0
        for body in sorted(known, key=later):  # stable: the listing's order otherwise
            key = _key(body)
            if key in loops:
                continue
            start_loop(key, _plain(body), None if by_policy is None else by_policy.get(key, []))
            started += 1
            if started % _LOOPS_PER_YIELD == 0:
                await asyncio.sleep(0)
        log.info("started the loops of %d policies from the policy cache", started)

    @kopf.on.event(*resource, registry=registry)
    async def on_policy(*, type: str | None, body: kopf.Body, **_: Any) -> None:
        key = _key(body)
        entry = loops.get(key)
        if type == "DELETED":
            if entry is not None:
                del loops[key]
                await stop(entry)
                await asyncio.get_running_loop().run_in_executor(pool, cleanup, key, entry.memory)
            return
        plain = _plain(body)
        if entry is None or entry.task is None or entry.task.done():
            start_loop(key, plain)
            return
        before, entry.body = entry.body, plain
        if _essence(before) != _essence(plain):
            entry.memory.wakeup.poke()  # the spec (or a label, an annotation) changed: run now

    def cleanup(key: tuple[str, str], memory: PolicyMemory) -> None:
        namespace, name = key
        with memory.lock:
            try:
                deleted = delete_owned(deps, namespace, name)
            except KubeError as e:  # the garbage collector removes the rest (owner references)
                log.warning("%s/%s deleted; removing what it owned failed: %s", namespace, name, e)
                return
        deps.metrics.forget(namespace, name)
        if deps.clusters is not None:
            deps.clusters.forget(key)
        log.info("%s/%s deleted with %d owned objects", namespace, name, deleted)

    def on_lease(event_type: str, body: dict[str, Any]) -> None:
        """A Lease event of the cache, run in kopf's loop (as the policy loops and their Wakeup)."""
        meta = body.get("metadata", {})
        name = str(meta.get("name"))
        if event_type == "DELETED":
            LEASE_RECORDS.forget(str(meta.get("namespace")), name)
        entry = loops.get((str(meta.get("namespace")), str(meta.get("labels", {}).get(LABEL_POLICY))))
        if entry is None:
            return  # its policy is not known (yet): the policy's first run reads it
        memory = entry.memory
        lease = None if event_type == "DELETED" else body
        if lease is not None:
            observe_lease(
                lease,
                clock=memory.clock,
                now=time.monotonic(),
                duration=settings.reconcile.lease_duration_seconds,
            )
        memory.wakeup.note_lease(name, lease)

    def on_pod(event_type: str, body: dict[str, Any]) -> None:
        """A Pod event of the cache, run in kopf's loop: a consumer container that started or
        ended wakes its policy (a holder that exited is void at once, docs/design.md §7.5)."""
        meta = body.get("metadata", {})
        entry = loops.get((str(meta.get("namespace")), str(meta.get("labels", {}).get(LABEL_POLICY))))
        if entry is not None:
            entry.memory.wakeup.note_pod(str(meta.get("name")), None if event_type == "DELETED" else body)

    lease_listeners: list[Listener] = []
    pod_listeners: list[Listener] = []
    claim_listeners: list[WakeListener] = []
    cluster_listeners: list[WakeListener] = []

    def wake(keys: frozenset[PolicyKey]) -> None:
        """Wake the loops of these policies (in kopf's loop, as the loops and their Wakeup)."""
        for key in keys:
            entry = loops.get(key)
            if entry is not None:
                entry.memory.wakeup.poke()

    def waker() -> WakeListener:
        """A listener for a watch thread that wakes policies in kopf's loop."""
        loop = asyncio.get_running_loop()

        def from_watch_thread(keys: frozenset[PolicyKey]) -> None:
            with contextlib.suppress(RuntimeError):  # kopf's loop is closed: the operator stops
                loop.call_soon_threadsafe(wake, keys)

        return from_watch_thread

    @kopf.on.startup(registry=registry)
    async def follow_claims(**_: Any) -> None:
        if deps.claims is not None:
            listener = waker()
            deps.claims.add_listener(listener)
            claim_listeners.append(listener)

    @kopf.on.startup(registry=registry)
    async def follow_clusters(**_: Any) -> None:  # a cluster changed, or its budget freed a handoff
        if deps.clusters is not None:
            listener = waker()
            deps.clusters.add_listener(listener)
            cluster_listeners.append(listener)

    @kopf.on.startup(registry=registry)
    async def follow_leases(**_: Any) -> None:
        if deps.caches is None:
            log.warning("no watch caches: Lease changes wake no policy loop (each waits for its tick)")
            return
        loop = asyncio.get_running_loop()

        def from_watch_thread(event_type: str, lease: dict[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # kopf's loop is closed: the operator stops
                loop.call_soon_threadsafe(on_lease, event_type, lease)

        deps.caches.leases.add_listener(from_watch_thread)
        lease_listeners.append(from_watch_thread)

        def pod_from_watch_thread(event_type: str, pod: dict[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(on_pod, event_type, pod)

        deps.caches.pods.add_listener(pod_from_watch_thread)
        pod_listeners.append(pod_from_watch_thread)

    samplers: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def sample_loop_lag(**_: Any) -> None:
        """How late kopf's loop runs a timer, every `_LOOP_LAG_SAMPLE_S`: every watch event and
        wake-up reaches a policy's loop through it (groupops_operator_event_loop_lag_seconds)."""

        async def sample() -> None:
            while True:
                asked = time.monotonic()
                await asyncio.sleep(_LOOP_LAG_SAMPLE_S)
                late = time.monotonic() - asked - _LOOP_LAG_SAMPLE_S
                deps.metrics.event_loop_lag_seconds.observe(max(0.0, late))

        samplers.append(asyncio.create_task(sample(), name="event loop lag"))

    @kopf.on.cleanup(registry=registry)
    async def stop_everything(**_: Any) -> None:
        for sampler in samplers:
            sampler.cancel()
        samplers.clear()
        if deps.caches is not None:
            for listener in lease_listeners:
                deps.caches.leases.remove_listener(listener)
            for listener in pod_listeners:
                deps.caches.pods.remove_listener(listener)
        lease_listeners.clear()
        pod_listeners.clear()
        if deps.claims is not None:
            for claim_listener in claim_listeners:
                deps.claims.remove_listener(claim_listener)
        claim_listeners.clear()
        if deps.clusters is not None:
            for cluster_listener in cluster_listeners:
                deps.clusters.remove_listener(cluster_listener)
        cluster_listeners.clear()
        entries = list(loops.values())
        loops.clear()
        await asyncio.gather(*(stop(entry) for entry in entries))
        await sweep.close()

    return registry


@dataclass(slots=True, kw_only=True)
class _PolicyLoop:
    """One policy's loop: the policy as last seen (the loop reconciles it), its memory, its task."""

    key: tuple[str, str]
    body: dict[str, Any]
    memory: PolicyMemory
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


def _essence(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a person changes (status, resourceVersion and managedFields are not it)."""
    meta = body.get("metadata") or {}
    return (meta.get("generation"), meta.get("labels"), meta.get("annotations"), body.get("spec"))


def _key(body: Any) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return str(meta.get("namespace")), str(meta.get("name"))


def _name(body: Any) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"
