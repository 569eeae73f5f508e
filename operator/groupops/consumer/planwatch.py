"""Follows the plan ConfigMap `<policy>-plan` with a watch (never by polling) in a thread.

Who calls it: the plan-delivery runtime. `latest` is the newest plan seen (epochs only go up:
an older or equal epoch is ignored); `on_change` is called from the watch thread whenever it
changes, so the main loop can wake up. After a fence the runtime re-reads the ConfigMap itself
(`ReplicaKube.get_configmap`) and hands the object to `offer`, because a watch that was cut off
may not have noticed yet.

The watch starts without a resourceVersion (the first event is the current object), resumes
from the last resourceVersion it saw (bookmarks included), starts over when that version
expired (410 Gone), and retries a broken connection with a capped backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from groupops.consumer.kube import ReplicaKube
from groupops.kubeapi import Expired, KubeError
from groupops.planner.plan_format import PlanFormatError, PublishedPlan, plan_from_configmap

__all__ = ["PlanWatcher"]

log = logging.getLogger(__name__)

_WATCH_TIMEOUT_S = 60
_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 5.0


class PlanWatcher:
    def __init__(self, kube: ReplicaKube, name: str, *, on_change: Callable[[], None] = lambda: None) -> None:
        self._kube = kube
        self.name = name
        self._on_change = on_change
        self._lock = threading.Lock()
        self._latest: PublishedPlan | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = False

    @property
    def latest(self) -> PublishedPlan | None:
        with self._lock:
            return self._latest

    @property
    def newest_epoch(self) -> int:
        latest = self.latest
        return -1 if latest is None else latest.epoch

    def offer(self, configmap: Mapping[str, Any]) -> bool:
        """Take a ConfigMap object (from the watch or a fresh read); True when it is newer."""
        metadata = configmap.get("metadata") or {}
        try:
            published = plan_from_configmap(configmap.get("data") or {}, metadata.get("annotations"))
        except PlanFormatError as e:
            log.error(
                "ignoring plan ConfigMap %s version %s: %s", self.name, metadata.get("resourceVersion"), e
            )
            return False
        with self._lock:
            if self._latest is not None and published.epoch <= self._latest.epoch:
                return False
            self._latest = published
        log.info("plan epoch %d seen", published.epoch)
        self._on_change()
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="plan-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current wait; the thread is a daemon, so exit never waits for it."""
        self._stop.set()

    def _run(self) -> None:
        resource_version: str | None = None
        backoff = _BACKOFF_FIRST_S
        while not self._stop.is_set():
            try:
                for kind, obj in self._kube.watch_configmap(
                    self.name, resource_version=resource_version, timeout_s=_WATCH_TIMEOUT_S
                ):
                    self.connected = True
                    backoff = _BACKOFF_FIRST_S
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if kind in ("ADDED", "MODIFIED"):
                        self.offer(obj)
                    if self._stop.is_set():
                        return
            except Expired:
                resource_version = None  # expired: start over from the current object
                continue
            except KubeError as e:
                self.connected = False
                log.warning("watch of plan %s broke (%s); again in %.1f s", self.name, e, backoff)
                self._stop.wait(backoff)
                backoff = min(_BACKOFF_MAX_S, backoff * 2)
