"""The replica's few Kubernetes calls: get/create/update its Lease, get/watch its plan ConfigMap.

Who calls it: `lease.LeaseKeeper` (its own client, in its thread), `planwatch.PlanWatcher` (its own
client, in its thread) and the runtime's main loop (re-reading the plan after a fence). The
consumer's Role allows exactly `get`/`update` on its Lease and `get`/`watch` on its plan ConfigMap
(by resourceName), so this module never lists and only creates a Lease when allowed (outside the
operator, e.g. a developer running `groupops consume` by hand).

The requests and their errors are the operator's (`groupops.kubeapi`): one client, one error
tree. Every request has its own timeout and no retry: a hung API server must cost one timeout,
never a lease duration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from groupops.kubeapi import KubeClient

__all__ = ["ReplicaKube", "WatchEvent"]

WatchEvent = tuple[str, dict[str, Any]]
"""(type, object): ADDED, MODIFIED, DELETED, BOOKMARK; ERROR events raise (`Expired` for 410)."""

_LEASE = ("coordination.k8s.io/v1", "Lease")
_CONFIGMAP = ("v1", "ConfigMap")


class ReplicaKube:
    """One connection pool for one thread, bound to the replica's namespace."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self._client = client
        self.namespace = namespace

    @classmethod
    def connect(cls, namespace: str, *, kubeconfig: str | None, timeout_s: float) -> ReplicaKube:
        """From `kubeconfig` (a path), else the pod's ServiceAccount, else ~/.kube/config.
        Raises KubeError when none is usable."""
        client = KubeClient.from_environment(
            kubeconfig=kubeconfig, timeout=timeout_s, pool_size=2, retries=False
        )
        return cls(client, namespace)

    def close(self) -> None:
        self._client.close()

    def get_lease(self, name: str) -> dict[str, Any] | None:
        return self._client.get(*_LEASE, self.namespace, name)

    def create_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """AlreadyExists when another process created it first."""
        return self._client.create(body)

    def update_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT with the body's resourceVersion: Conflict when someone wrote in between."""
        return self._client.replace(body)

    def get_configmap(self, name: str) -> dict[str, Any] | None:
        return self._client.get(*_CONFIGMAP, self.namespace, name)

    def watch_configmap(
        self, name: str, *, resource_version: str | None, timeout_s: int
    ) -> Iterator[WatchEvent]:
        """Watch one ConfigMap by name (allowed by a `watch` rule restricted to that name).
        Without a resourceVersion the first event is the current object (if any). The server
        ends the watch after `timeout_s`; a silent connection is given up a little later. An
        expired resourceVersion raises Expired (HTTP 410 Gone): start again without one."""
        stream = self._client.watch(
            *_CONFIGMAP,
            self.namespace,
            field_selector=f"metadata.name={name}",
            resource_version=resource_version or "",
            timeout_seconds=timeout_s,
        )
        for event in stream:
            yield str(event.get("type", "")), event.get("object") or {}
