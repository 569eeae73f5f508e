"""The kopf handlers: thin. Each one takes the policy's lock, runs `reconcile`, and translates
its outcome into kopf's terms; nothing here decides anything about plans or objects.

    create / update / resume  -> reconcile (update fires on spec, label and annotation changes,
                                 e.g. the approval annotation; never on our own status writes)
    timer (every tick)        -> reconcile (lag, liveness, the rebalance interval); skipped when
                                 another run of the same policy is in progress
    delete                    -> remove everything the policy owns (the test stack and some
                                 clusters run no garbage collector, so owner references alone
                                 are not relied on), then kopf lifts the finalizer

Failures: `ReconcileFailure(transient=True)` -> kopf.TemporaryError with a doubling delay (each
attempt logged with its number); otherwise kopf.PermanentError on change handlers (status already
says why; the next spec change runs again) and a quiet skip on the timer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from groupops.controller.kube import KubeError
from groupops.controller.names import API_GROUP, API_VERSION, PLURAL, owned_selector
from groupops.controller.reconcile import Deps, PolicyMemory, ReconcileFailure, reconcile

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


def _plain(value: Any) -> Any:
    """kopf hands out read-only views; the reconcile works on plain dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _memory(memo: Any) -> PolicyMemory:
    memory = memo.get("groupops")
    if memory is None:
        memory = memo.setdefault("groupops", PolicyMemory())
    assert isinstance(memory, PolicyMemory)
    return memory


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

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    def run(body: Any, memo: Any, retry: int, *, from_timer: bool) -> None:
        memory = _memory(memo)
        if not memory.lock.acquire(blocking=not from_timer, timeout=-1 if from_timer else _LOCK_WAIT_S):
            if from_timer:
                return
            raise kopf.TemporaryError("another reconcile of this policy is still running", delay=1.0)
        try:
            result = reconcile(_plain(body), deps, memory)
        except ReconcileFailure as failure:
            if failure.transient:
                delay = settings.reconcile.backoff(retry + 1)
                log.info("retry %d of %s in %.0fs: %s", retry + 1, _name(body), delay, failure)
                raise kopf.TemporaryError(str(failure), delay=delay) from failure
            if from_timer:
                return
            raise kopf.PermanentError(str(failure)) from failure
        finally:
            memory.lock.release()
        if result.published:
            log.info("%s: epoch %d published (%s)", _name(body), result.epoch, result.trigger)

    @kopf.on.create(*resource, registry=registry)
    @kopf.on.update(*resource, registry=registry)
    @kopf.on.resume(*resource, registry=registry)
    def on_change(*, body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        run(body, memo, retry, from_timer=False)

    @kopf.timer(
        *resource,
        interval=settings.reconcile.tick_seconds,
        initial_delay=settings.reconcile.tick_seconds,
        registry=registry,
    )
    def on_tick(*, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        run(body, memo, int(kwargs.get("retry") or 0), from_timer=True)

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


def _name(body: Any) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"
