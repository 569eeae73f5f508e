"""The consumer's few Kubernetes calls, as JSON: get/update its Lease, get/watch its plan ConfigMap.

Who calls it: `lease.LeaseKeeper` (its own client, in its thread), `planwatch.PlanWatcher` (its own
client, in its thread) and the runtime's main loop (re-reading the plan after a fence). The
consumer's Role allows exactly `get`/`update` on its Lease and `get`/`watch` on its plan ConfigMap
(by resourceName), so this module never lists and only creates a Lease when allowed (outside the
operator, e.g. a developer running `groupops consume` by hand).

Every request has its own timeout and no automatic retry: a hung API server must cost one
timeout, never a lease duration. Foreign errors become the `errors` tree here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from groupops.consumer.errors import (
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeUnavailable,
)

__all__ = ["KubeClient", "WatchEvent"]

WatchEvent = tuple[str, dict[str, Any]]
"""(type, object): ADDED, MODIFIED, DELETED, BOOKMARK; ERROR objects become exceptions."""

_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_CONFIGMAPS = "/api/v1/namespaces/{namespace}/configmaps"


class KubeClient:
    """One API connection pool for one thread. `timeout_s` bounds every plain request."""

    def __init__(self, api_client: k8s_client.ApiClient, namespace: str, *, timeout_s: float) -> None:
        self._api = api_client
        self.namespace = namespace
        self._timeout_s = timeout_s

    @classmethod
    def connect(cls, namespace: str, *, kubeconfig: str | None, timeout_s: float) -> KubeClient:
        """A client from `kubeconfig` (a path), else the pod's ServiceAccount, else
        ~/.kube/config. Raises KubeError when none is usable."""
        configuration = k8s_client.Configuration()
        try:
            if kubeconfig:
                k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                try:
                    k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                except k8s_config.ConfigException:
                    k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except (k8s_config.ConfigException, OSError) as e:
            raise KubeError(f"no usable Kubernetes credentials: {e}") from e
        configuration.retries = False  # one attempt per request: the caller owns the retry policy
        return cls(k8s_client.ApiClient(configuration), namespace, timeout_s=timeout_s)

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    # -- Lease ------------------------------------------------------------------------------------

    def get_lease(self, name: str) -> dict[str, Any] | None:
        try:
            return self._request("GET", f"{_LEASES.format(namespace=self.namespace)}/{name}")
        except KubeNotFound:
            return None

    def create_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._request("POST", _LEASES.format(namespace=self.namespace), body=body)

    def update_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT with the body's resourceVersion: KubeConflict when someone wrote in between."""
        name = body["metadata"]["name"]
        return self._request("PUT", f"{_LEASES.format(namespace=self.namespace)}/{name}", body=body)

    # -- plan ConfigMap ---------------------------------------------------------------------------

    def get_configmap(self, name: str) -> dict[str, Any] | None:
        try:
            return self._request("GET", f"{_CONFIGMAPS.format(namespace=self.namespace)}/{name}")
        except KubeNotFound:
            return None

    def watch_configmap(
        self, name: str, *, resource_version: str | None, timeout_s: int
    ) -> Iterator[WatchEvent]:
        """Watch one ConfigMap by name (allowed by a `watch` rule restricted to that name).
        Without a resourceVersion the first event is the current object (if any). The server
        ends the watch after `timeout_s`; a silent connection is given up a little later. An
        expired resourceVersion raises KubeConflict (HTTP 410 Gone): start again without one."""
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("fieldSelector", f"metadata.name={name}"),
            ("timeoutSeconds", str(timeout_s)),
            ("allowWatchBookmarks", "true"),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._send(
            "GET",
            _CONFIGMAPS.format(namespace=self.namespace),
            query=query,
            timeout=(self._timeout_s, timeout_s + max(5.0, self._timeout_s)),
        )
        raw = response.response
        try:
            if response.status >= 400:
                raise _error_for(response.status, response.read() or b"", "watch configmap")
            for line in _lines(raw):
                event = json.loads(line)
                kind = str(event.get("type", ""))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 0)
                    message = str(obj.get("message", ""))
                    if code == 410:
                        raise KubeConflict(f"watch expired: {message}", status=410)
                    raise KubeUnavailable(f"watch error {code}: {message}", status=code)
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise KubeUnavailable(f"watch of configmap {name} broke: {e}") from e
        finally:
            raw.release_conn()

    # -- plumbing ---------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        response = self._send(method, path, body=body, timeout=self._timeout_s)
        try:
            raw = response.read() or b""
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeUnavailable(f"{method} {path}: {e}") from e
        if response.status >= 400:
            raise _error_for(response.status, raw, f"{method} {path}")
        result: dict[str, Any] = json.loads(raw) if raw else {}
        return result

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float],
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        try:
            verb, url, header_params, _, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            # The REST layer serialises the body itself (json.dumps), so it gets the object.
            return self._api.call_api(
                verb, url, header_params=header_params, body=body, _request_timeout=timeout
            )
        except ApiException as e:  # the client raises these only when no HTTP answer came back
            raise KubeUnavailable(f"{method} {path}: {e.reason}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeUnavailable(f"{method} {path}: {e}") from e


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited JSON from a streamed response, as the API server sends watch events."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _error_for(status: int, raw: bytes, where: str) -> KubeError:
    try:
        message = str(json.loads(raw).get("message", ""))
    except (ValueError, AttributeError):
        message = raw[:200].decode("utf-8", "replace")
    text = f"{where}: HTTP {status}: {message}"
    if status in (409, 410):
        return KubeConflict(text, status=status)
    if status == 404:
        return KubeNotFound(text, status=status)
    if status in (401, 403):
        return KubeForbidden(text, status=status)
    if status == 429 or status >= 500:
        return KubeUnavailable(text, status=status)
    return KubeError(text, status=status)
