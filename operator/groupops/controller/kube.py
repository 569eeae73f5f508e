"""A small JSON client for the Kubernetes API, and its error tree.

Everything the operator reads or writes goes through `KubeClient` as plain dicts (the same dicts
the render functions produce), over the official client's configured connection (kubeconfig or
in-cluster account, TLS, token refresh). Foreign errors are mapped here, once:

    KubeError
    ├── NotFound         404
    ├── AlreadyExists    409 AlreadyExists (a create raced another writer, or a restart)
    ├── Conflict         409 on a stale resourceVersion: re-read and try again
    ├── Rejected         400/422: the object is invalid (a bad pod template); retrying will not help
    ├── Forbidden        401/403: the operator's RBAC is missing something
    └── Transient        5xx, 429, timeouts, connection failures: retry with backoff
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Forbidden",
    "KubeClient",
    "KubeError",
    "NotFound",
    "Rejected",
    "Transient",
    "resource_path",
]

_PLURALS = {
    "ConfigMap": "configmaps",
    "Pod": "pods",
    "Secret": "secrets",
    "ServiceAccount": "serviceaccounts",
    "Event": "events",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Lease": "leases",
    "ConsumerGroupPolicy": "consumergrouppolicies",
}


class KubeError(Exception):
    """A failed API call. `status` is the HTTP status (0 when no answer came)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class AlreadyExists(KubeError):
    pass


class Conflict(KubeError):
    pass


class Rejected(KubeError):
    pass


class Forbidden(KubeError):
    pass


class Transient(KubeError):
    pass


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    plural = _PLURALS.get(kind)
    if plural is None:
        raise ValueError(f"kind {kind!r} is not one the operator manages")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


def _error_for(status: int, body: bytes, where: str) -> KubeError:
    try:
        document = json.loads(body)
        message, reason = str(document.get("message", "")), str(document.get("reason", ""))
    except (ValueError, AttributeError):
        message, reason = body[:300].decode("utf-8", "replace"), ""
    text = f"{where}: HTTP {status} {reason}: {message}"
    if status == 404:
        return NotFound(text, status=status, reason=reason)
    if status == 409:
        kind = AlreadyExists if reason == "AlreadyExists" else Conflict
        return kind(text, status=status, reason=reason)
    if status in (400, 422):
        return Rejected(text, status=status, reason=reason)
    if status in (401, 403):
        return Forbidden(text, status=status, reason=reason)
    return Transient(text, status=status, reason=reason)


class KubeClient:
    """JSON in, JSON out. `timeout` bounds every request (seconds)."""

    def __init__(self, api_client: k8s_client.ApiClient, *, timeout: float = 30.0) -> None:
        self._api = api_client
        self._timeout = timeout

    @classmethod
    def from_environment(cls, *, timeout: float = 30.0, pool_size: int = 32) -> KubeClient:
        """In a pod: its ServiceAccount; elsewhere: $KUBECONFIG or ~/.kube/config."""
        try:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
        configuration = k8s_client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = pool_size  # one connection per concurrent reconcile
        return cls(k8s_client.ApiClient(configuration), timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        where = f"{method} {path}"
        try:
            verb, url, header_params, _, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list((query or {}).items()) or None,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(
                verb, url, header_params=header_params, body=body, _request_timeout=self._timeout
            )
            raw = response.read()  # type: ignore[no-untyped-call]
        except ApiException as e:  # raised by the client only when no HTTP answer came (TLS)
            raise Transient(f"{where}: {e.reason}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Transient(f"{where}: {e}") from e
        if response.status >= 400:
            raise _error_for(response.status, raw or b"", where)
        if not raw:
            return {}
        result: dict[str, Any] = json.loads(raw)
        return result

    # -- typed helpers ----------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", resource_path(api_version, kind, namespace, name))
        except NotFound:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        items: list[dict[str, Any]] = self.request(
            "GET", resource_path(api_version, kind, namespace), query=query
        ).get("items", [])
        for item in items:  # list items come without apiVersion/kind; the applier needs them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        meta = body["metadata"]
        query = {"dryRun": "All"} if dry_run else None
        return self.request(
            "POST",
            resource_path(body["apiVersion"], body["kind"], meta.get("namespace")),
            query=query,
            body=body,
        )

    def replace(self, body: Mapping[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        path = resource_path(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        return self.request("PUT", path, body=body)

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        path = resource_path(api_version, kind, namespace, name)
        if subresource:
            path += f"/{subresource}"
        return self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.request(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except NotFound:
            return False
        return True
