"""The kopf handlers: thin. Each one takes the policy's lock, runs `reconcile`, and translates
its outcome into kopf's terms; nothing here decides anything about plans or objects.

    create / update / resume  -> reconcile (update fires on spec, label and annotation changes,
                                 e.g. the approval annotation; never on our own status writes)
    daemon (one per policy)   -> reconcile every tick (lag, liveness, the rebalance interval), and
                                 between ticks when a Lease of the policy changed what the plan
                                 depends on or a held Lease ran out (`wakeup`)
    a policy's Lease changed   -> note it on the policy's LeaseClock; wake its daemon if needed
                                 (a listener of the Lease watch cache, `cache`: kopf does not
                                 watch Leases, so the operator never receives other Leases)
    delete                    -> remove everything the policy owns (the test stack and some
                                 clusters run no garbage collector, so owner references alone
                                 are not relied on), then kopf lifts the finalizer

Failures: `ReconcileFailure(transient=True)` -> kopf.TemporaryError with a doubling delay (each
attempt logged with its number; the daemon waits the same delay); otherwise kopf.PermanentError on
change handlers (status already says why; the next spec change runs again) and the next tick in
the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from groupops.controller.cache import Listener
from groupops.controller.identities import observe_lease
from groupops.controller.names import API_GROUP, API_VERSION, LABEL_POLICY, PLURAL, owned_selector
from groupops.controller.reconcile import Deps, PolicyMemory, ReconcileFailure, reconcile
from groupops.controller.wakeup import expiry_due, next_wake
from groupops.kubeapi import KubeError
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.plan_format import HEARTBEAT_LIVENESS, LEASE_LIVENESS_ANNOTATION

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
_DAEMON_STOP_S = 5.0


def _plain(value: Any) -> Any:
    """kopf hands out read-only views; the reconcile works on plain dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _memory(memo: Any, body: Any = None, deps: Deps | None = None) -> PolicyMemory:
    """The policy's memory. A new one starts from this process's sightings of its Leases (a
    standby that just took over judges expiry from what it watched while standing by), counts
    every Lease in heartbeat mode as heard now (heartbeats the previous leader granted were
    answered before this process led: docs/design.md §7.5), and from now on receives the
    heartbeats this process grants."""
    memory = memo.get("groupops")
    if memory is None:
        memory = memo.setdefault("groupops", PolicyMemory())
        if deps is not None and body is not None:
            namespace, name = _key(body)
            if deps.sightings is not None:
                deps.sightings.seed(memory.clock, namespace, name)
            if deps.heartbeats is not None:
                _hear_heartbeat_leases(memory.clock, deps, namespace, name)
                deps.heartbeats.attach(namespace, name, memory.clock)
    assert isinstance(memory, PolicyMemory)
    return memory


def _hear_heartbeat_leases(clock: LeaseClock, deps: Deps, namespace: str, policy: str) -> None:
    now = time.monotonic()
    for lease in deps.reader.list(
        "coordination.k8s.io/v1", "Lease", namespace, label_selector=f"{LABEL_POLICY}={policy}"
    ):
        meta = lease.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(LEASE_LIVENESS_ANNOTATION) == HEARTBEAT_LIVENESS:
            clock.hear(MemberId(str(meta.get("name"))), now)


def delete_owned(deps: Deps, namespace: str, policy: str) -> int:
    """Delete every object labelled as the policy's; returns how many were deleted."""
    deleted = 0
    for api_version, kind in OWNED_KINDS:
        for item in deps.client.list(api_version, kind, namespace, label_selector=owned_selector(policy)):
            if deps.client.delete(api_version, kind, namespace, item["metadata"]["name"]):
                deleted += 1
    return deleted


def build_registry(deps: Deps) -> kopf.OperatorRegistry:
    """A registry with every handler of the operator, bound to `deps`."""
    registry = kopf.OperatorRegistry()
    settings = deps.settings
    resource = (API_GROUP, API_VERSION, PLURAL)

    @kopf.on.startup(registry=registry)
    def configure(*, settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf's bookkeeping in annotations under its own prefix (status belongs to the CRD schema;
        # kopf ignores every annotation of its prefix, and groupops.dev/approve must trigger updates).
        settings.persistence.finalizer = "groupops.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.groupops.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="kopf.groupops.dev", key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # our Events say what happened; kopf's would repeat it
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.execution.max_workers = deps.settings.reconcile.workers  # the change handlers

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    pool = ThreadPoolExecutor(max_workers=settings.reconcile.workers, thread_name_prefix="reconcile")
    memories: dict[tuple[str, str], PolicyMemory] = {}
    """The memory of every policy whose daemon runs, for the Lease watch to reach."""

    def reconcile_locked(body: Any, memory: PolicyMemory) -> bool:
        """One reconcile under the policy's lock (waiting for a run in progress); False when the
        lock did not come. ReconcileFailure passes through to the caller."""
        if not memory.lock.acquire(timeout=_LOCK_WAIT_S):
            return False
        try:
            result = reconcile(_plain(body), deps, memory)
        finally:
            memory.lock.release()
        memory.failures = 0
        if result.published:
            log.info("%s: epoch %d published (%s)", _name(body), result.epoch, result.trigger)
        return True

    def run(body: Any, memo: Any, retry: int) -> None:
        """A change handler's reconcile: failures go to kopf."""
        try:
            done = reconcile_locked(body, _memory(memo, body, deps))
        except ReconcileFailure as failure:
            if failure.transient:
                delay = settings.reconcile.backoff(retry + 1)
                log.info("retry %d of %s in %.0fs: %s", retry + 1, _name(body), delay, failure)
                raise kopf.TemporaryError(str(failure), delay=delay) from failure
            raise kopf.PermanentError(str(failure)) from failure
        if not done:
            raise kopf.TemporaryError("another reconcile of this policy is still running", delay=1.0)

    def run_in_loop(body: Any, memory: PolicyMemory) -> float | None:
        """The daemon's reconcile (in a worker thread): returns a retry delay after a transient
        failure, else None. Never raises: the loop must outlive every failure."""
        try:
            reconcile_locked(body, memory)
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

    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    @kopf.on.resume(*resource, registry=registry)
    def on_change(*, body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        run(body, memo, retry)

    @kopf.daemon(*resource, registry=registry, cancellation_timeout=_DAEMON_STOP_S)
    async def policy_loop(*, body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
        # `body` is kopf's live view: every run reads the policy as last seen.
        memory = _memory(memo, body, deps)
        key = _key(body)
        memories[key] = memory
        loop = asyncio.get_running_loop()

        def poke() -> None:  # from another thread, e.g. a lag read that landed late
            loop.call_soon_threadsafe(memory.wakeup.poke)

        memory.poke = poke
        tick = settings.reconcile.tick_seconds
        next_tick = time.monotonic() + tick
        judged_until = time.monotonic()
        stopping = asyncio.ensure_future(_stop_signal(stopped))  # ends a wait at once on shutdown
        try:
            while not stopped:
                wake_at = next_wake(
                    now=time.monotonic(), next_tick=next_tick, clock=memory.clock, judged_until=judged_until
                )
                woken = await memory.wakeup.wait_until(wake_at, interrupt=stopping)
                now = time.monotonic()
                if stopped:
                    break
                if not (
                    woken
                    or now >= next_tick
                    or expiry_due(now=now, clock=memory.clock, judged_until=judged_until)
                ):
                    continue  # the Lease we woke for was renewed meanwhile
                delay = await loop.run_in_executor(pool, run_in_loop, body, memory)
                judged_until = now
                next_tick = time.monotonic() + (delay if delay is not None else tick)
        finally:
            stopping.cancel()
            if memories.get(key) is memory:
                del memories[key]
            if deps.heartbeats is not None:
                deps.heartbeats.detach(*key, memory.clock)

    def on_lease(event_type: str, body: dict[str, Any]) -> None:
        """A Lease event of the cache, run in kopf's loop (as the daemons and their Wakeup)."""
        meta = body.get("metadata", {})
        memory = memories.get((str(meta.get("namespace")), str(meta.get("labels", {}).get(LABEL_POLICY))))
        if memory is None:
            return  # its policy's daemon is not running (yet): the policy's first run reads it
        name = str(meta.get("name"))
        lease = None if event_type == "DELETED" else body
        if lease is not None:
            observe_lease(
                lease,
                clock=memory.clock,
                now=time.monotonic(),
                duration=settings.reconcile.lease_duration_seconds,
            )
        memory.wakeup.note_lease(name, lease)

    lease_listeners: list[Listener] = []

    @kopf.on.startup(registry=registry)
    async def follow_leases(**_: Any) -> None:
        if deps.caches is None:
            log.warning("no watch caches: Lease changes wake no daemon (each waits for its tick)")
            return
        loop = asyncio.get_running_loop()

        def from_watch_thread(event_type: str, lease: dict[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # kopf's loop is closed: the operator stops
                loop.call_soon_threadsafe(on_lease, event_type, lease)

        deps.caches.leases.add_listener(from_watch_thread)
        lease_listeners.append(from_watch_thread)

    @kopf.on.cleanup(registry=registry)
    async def unfollow_leases(**_: Any) -> None:
        if deps.caches is not None:
            for listener in lease_listeners:
                deps.caches.leases.remove_listener(listener)
        lease_listeners.clear()

    @kopf.on.delete(*resource, registry=registry)
    def on_delete(*, body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        meta = body.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        memory = _memory(memo)
        with memory.lock:
            try:
                deleted = delete_owned(deps, namespace, name)
            except KubeError as e:
                raise kopf.TemporaryError(
                    f"cleanup failed: {e}", delay=settings.reconcile.backoff(retry + 1)
                ) from e
        deps.metrics.forget(namespace, name)
        log.info("%s/%s deleted with %d owned objects", namespace, name, deleted)

    return registry


async def _stop_signal(stopped: kopf.DaemonStopped) -> None:
    await stopped.wait()


def _key(body: Any) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return str(meta.get("namespace")), str(meta.get("name"))


def _name(body: Any) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"
