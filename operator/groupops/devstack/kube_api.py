"""A small JSON client of the real API server for the kubelet harness (devstack/kubelet.py), the
demo, the consumer-runtime tests and the benchmarks: any path, any verb, dictionaries in and out.

Not the operator's client (groupops.kubeapi): this one is deliberately raw, so that a test or the
harness can reach what the product never does (pod bindings, pod status, any verb on any path)
and sees every HTTP status as it is (`ApiError.status`; 0 for a broken watch).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

__all__ = ["ApiError", "KubeApi"]

_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ConsumerGroupPolicy": "/apis/groupops.dev/v1alpha1/namespaces/{ns}/consumergrouppolicies",
    "ConsumerGroupCluster": "/apis/groupops.dev/v1alpha1/consumergroupclusters",
    "Event": "/api/v1/namespaces/{ns}/events",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
}


class ApiError(Exception):
    """An answer of status >= 400 (its `message`), or a watch that broke (status 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class KubeApi:
    """One connection pool; `timeout` bounds each plain request (seconds)."""

    def __init__(self, kubeconfig: str, *, timeout: float = 20.0) -> None:
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.retries = False
        self.kubeconfig = kubeconfig
        self._api = k8s_client.ApiClient(configuration)
        self._timeout = timeout

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
        base = _PATHS[kind].format(ns=namespace)
        return base if name is None else f"{base}/{name}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        verb, url, headers, _, _ = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()) or None,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(
            verb,
            url,
            header_params=headers,
            body=body,
            _request_timeout=timeout or self._timeout,
        )
        if stream:
            return response
        raw = response.read() or b""  # type: ignore[no-untyped-call]
        if response.status >= 400:
            try:
                message = json.loads(raw).get("message", "")
            except ValueError:
                message = raw[:200].decode(errors="replace")
            raise ApiError(response.status, message)
        return json.loads(raw) if raw else {}

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.request("GET", self.path(kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        return result

    def list(self, kind: str, namespace: str | None, *, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        return list(self.request("GET", self.path(kind, namespace), query=query).get("items", []))

    def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", self.path(kind, namespace), body)
        return result

    def replace(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PUT", self.path(kind, namespace, body["metadata"]["name"]), body
        )
        return result

    def patch(
        self, kind: str, namespace: str | None, name: str, patch: Mapping[str, Any], *, subresource: str = ""
    ) -> dict[str, Any]:
        path = self.path(kind, namespace, name) + (f"/{subresource}" if subresource else "")
        result: dict[str, Any] = self.request(
            "PATCH", path, patch, content_type="application/merge-patch+json"
        )
        return result

    def delete(
        self, kind: str, namespace: str | None, name: str, *, grace_seconds: int | None = None
    ) -> bool:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            self.request("DELETE", self.path(kind, namespace, name), body)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def watch(
        self,
        kind: str,
        namespace: str | None,
        *,
        resource_version: str | None,
        timeout_s: int = 30,
        on_open: Callable[[urllib3.BaseHTTPResponse], None] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events of one watch call (ends after `timeout_s`); ERROR events raise ApiError.
        `on_open` gets the open response: its `shutdown()`, from another thread, ends the watch
        at once (the harness stops this way)."""
        query = {"watch": "true", "timeoutSeconds": str(timeout_s), "allowWatchBookmarks": "true"}
        if resource_version:
            query["resourceVersion"] = resource_version
        response = self.request(
            "GET", self.path(kind, namespace), query=query, timeout=(10.0, timeout_s + 10.0), stream=True
        )
        raw = response.response
        if on_open is not None:
            on_open(raw)
        try:
            if response.status >= 400:
                raise ApiError(response.status, (response.read() or b"")[:200].decode(errors="replace"))
            pending = b""
            for chunk in raw.stream(amt=None, decode_content=False):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise ApiError(int(obj.get("code") or 0), str(obj.get("message", "")))
                    yield str(event["type"]), event["object"]
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, f"watch broke: {e}") from e
        finally:
            raw.release_conn()
