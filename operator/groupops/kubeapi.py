"""A small JSON client for the Kubernetes API, and its error tree: the one the operator and the
consumer replicas share.

Everything the operator reads or writes goes through `KubeClient` as plain dicts (the same dicts
the render functions produce), and so do a replica's Lease and plan reads and writes
(`consumer.kube`), over the official client's configured connection (kubeconfig or in-cluster
account, TLS, token refresh). A replica's client never retries a request (`retries=False`: a
renewal must cost one timeout, never a lease duration). Foreign errors are mapped here, once:

    KubeError
    ├── NotFound         404
    ├── AlreadyExists    409 AlreadyExists (a create raced another writer, or a restart)
    ├── Conflict         409 on a stale resourceVersion: re-read and try again
    ├── Rejected         400/422: the object is invalid (a bad pod template); retrying will not help
    ├── Forbidden        401/403: the operator's RBAC is missing something
    └── Transient        5xx, 429, timeouts, connection failures: retry with backoff
        └── Expired      410 Gone: a watch's resourceVersion is older than the server keeps; relist

Two hooks serve the watch caches (`cache`): `count_requests` sees every request as (verb, kind)
(the `groupops_operator_api_requests_total` counter), and `add_write_listener` sees the result of
every create, replace, patch and delete, so a cache shows the operator's own writes at once.
`watch` opens a streaming watch on its own connection pool: a watch holds its connection for
minutes, and must not take one of the pool sized for the reconcile workers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

__all__ = [
    "FIELD_MANAGER",
    "AlreadyExists",
    "Conflict",
    "Expired",
    "Forbidden",
    "KubeClient",
    "KubeError",
    "NotFound",
    "Rejected",
    "Transient",
    "WatchStream",
    "WriteListener",
    "describe_request",
    "resource_path",
]

log = logging.getLogger(__name__)

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
    "ConsumerGroupCluster": "consumergroupclusters",
}


FIELD_MANAGER = "groupops"
"""The operator's field manager: every object it writes names it in managedFields."""


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


class Expired(Transient):
    """410 Gone: the resourceVersion a watch asked for is older than the server keeps."""


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    plural = _PLURALS.get(kind)
    if plural is None:
        raise ValueError(f"kind {kind!r} is not one the operator manages")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


_KINDS = {plural: kind for kind, plural in _PLURALS.items()}


def describe_request(method: str, path: str, query: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(verb, kind) of a request, as RBAC names the verb: get, list, watch, create, update,
    patch, delete, deletecollection. The kind is the plural itself when it is not one of ours.

    >>> describe_request("GET", "/api/v1/namespaces/a/pods")
    ('list', 'Pod')
    """
    parts = [part for part in path.split("?", 1)[0].split("/") if part]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]  # past /api/v1 or /apis/<group>/<v>
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    elif rest[:1] == ["namespaces"]:
        rest = ["namespaces", *rest[1:]]
    plural = rest[0] if rest else ""
    named = len(rest) >= 2
    method = method.upper()
    if method == "GET":
        watching = (query or {}).get("watch") in ("true", "1")
        verb = "watch" if watching else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return verb, _KINDS.get(plural, plural)


class WriteListener(Protocol):
    """Told of every write the client made, with the object the server answered."""

    def written(self, obj: Mapping[str, Any]) -> None: ...

    def deleted(self, api_version: str, kind: str, namespace: str | None, name: str, uid: str | None) -> None:
        """Gone at once (a graceful deletion or a finalizer reports `written` with the object
        carrying its deletionTimestamp instead). `uid`: of the deleted object, when the server
        said it."""


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
    if status == 410:
        return Expired(text, status=status, reason=reason)
    return Transient(text, status=status, reason=reason)


_WATCH_POOL_SIZE = 256
"""Connections the watches' pool keeps: one per stream (a kind per watched namespace, and one per
auth Secret in use)."""

_WATCH_READ_MARGIN_S = 30.0
"""A watch is given up when silent this long past its timeoutSeconds (the server ends it then,
and sends bookmarks in between)."""


class WatchStream:
    """One open watch: iterating yields its events, dicts with `type` (ADDED, MODIFIED, DELETED,
    BOOKMARK) and `object`; it ends when the server ends the watch. An ERROR event raises
    (`Expired` for 410), a broken connection raises `Transient`, and so does `close()` (from
    any thread) in the iterating thread."""

    def __init__(self, response: Any, where: str) -> None:
        self._response = response
        self._where = where
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        raw = self._response
        try:
            for line in _lines(raw):
                event: dict[str, Any] = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = int(status.get("code") or 0)
                    raise _error_for(code, json.dumps(status).encode(), f"{self._where}: ERROR event")
                yield event
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            if self._closed.is_set():
                raise Transient(f"{self._where}: closed by the client") from e
            raise Transient(f"{self._where}: {e}") from e
        finally:
            raw.release_conn()
        if self._closed.is_set():
            raise Transient(f"{self._where}: closed by the client")

    def close(self) -> None:
        """End the iteration, from any thread: the socket is shut down under the reader."""
        self._closed.set()
        with contextlib.suppress(ValueError, RuntimeError, OSError):  # the reader already ended
            self._response.shutdown()


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


class KubeClient:
    """JSON in, JSON out. `timeout` bounds every request (seconds); `field_manager` names the
    writer in every object's managedFields (docs/design.md §13.4)."""

    def __init__(
        self, api_client: k8s_client.ApiClient, *, timeout: float = 30.0, field_manager: str = FIELD_MANAGER
    ) -> None:
        self.field_manager = field_manager
        self._api = api_client
        self._timeout = timeout
        self._watch_api: k8s_client.ApiClient | None = None
        self._watch_lock = threading.Lock()
        self._count: Callable[[str, str], None] | None = None
        self._write_listeners: list[WriteListener] = []

    def _watch_client(self) -> k8s_client.ApiClient:
        """The watches' own pool, same credentials (a copy of the configuration keeps its token
        refresh); sized so that no watch's connection is discarded when it ends."""
        with self._watch_lock:
            if self._watch_api is None:
                configuration = copy.deepcopy(self._api.configuration)
                configuration.connection_pool_maxsize = _WATCH_POOL_SIZE
                self._watch_api = k8s_client.ApiClient(configuration)
            return self._watch_api

    def count_requests(self, count: Callable[[str, str], None]) -> None:
        """Call `count(verb, kind)` before every request from now on (`describe_request`)."""
        self._count = count

    def add_write_listener(self, listener: WriteListener) -> None:
        """Tell `listener` the result of every write from now on (dry runs excepted)."""
        self._write_listeners.append(listener)

    @classmethod
    def from_environment(
        cls,
        *,
        kubeconfig: str | None = None,
        timeout: float = 30.0,
        pool_size: int = 32,
        retries: bool = True,
        field_manager: str = FIELD_MANAGER,
    ) -> KubeClient:
        """From `kubeconfig` (a path) when given; else in a pod its ServiceAccount, elsewhere
        $KUBECONFIG or ~/.kube/config. Raises KubeError when none is usable."""
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
        if not retries:
            configuration.retries = False  # one attempt per request: the caller owns the retry policy
        configuration.connection_pool_maxsize = pool_size  # one connection per concurrent caller
        return cls(k8s_client.ApiClient(configuration), timeout=timeout, field_manager=field_manager)

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]
        if self._watch_api is not None:
            self._watch_api.close()  # type: ignore[no-untyped-call]

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
        if self._count is not None:
            self._count(*describe_request(method, path, query))
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

    def list_at(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict[str, Any]], str]:
        """The items and the list's resourceVersion (where a watch continues from)."""
        query = {
            key: value
            for key, value in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if value
        }
        document = self.request("GET", resource_path(api_version, kind, namespace), query=query or None)
        items: list[dict[str, Any]] = document.get("items") or []
        for item in items:  # list items come without apiVersion/kind; the applier needs them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, str((document.get("metadata") or {}).get("resourceVersion") or "")

    def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        return self.list_at(api_version, kind, namespace, label_selector=label_selector)[0]

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str,
        timeout_seconds: int,
    ) -> WatchStream:
        """Open a watch from `resource_version` (with bookmarks); the server ends it after
        `timeout_seconds`. Counted as verb "watch"."""
        path = resource_path(api_version, kind, namespace)
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            **({"labelSelector": label_selector} if label_selector else {}),
            **({"fieldSelector": field_selector} if field_selector else {}),
        }
        selectors = ",".join(part for part in (label_selector, field_selector) if part)
        where = f"watch {path}" + (f" [{selectors}]" if selectors else "")
        if self._count is not None:
            self._count("watch", kind)
        watch_api = self._watch_client()
        try:
            verb, url, header_params, _, _ = watch_api.param_serialize(
                method="GET",
                resource_path=path,
                query_params=list(query.items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = watch_api.call_api(
                verb,
                url,
                header_params=header_params,
                _request_timeout=(self._timeout, timeout_seconds + _WATCH_READ_MARGIN_S),
            )
            if response.status >= 400:
                raise _error_for(response.status, response.read() or b"", where)  # type: ignore[no-untyped-call]
        except ApiException as e:
            raise Transient(f"{where}: {e.reason}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Transient(f"{where}: {e}") from e
        return WatchStream(response.response, where)

    def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        meta = body["metadata"]
        query = {"fieldManager": self.field_manager, **({"dryRun": "All"} if dry_run else {})}
        created = self.request(
            "POST",
            resource_path(body["apiVersion"], body["kind"], meta.get("namespace")),
            query=query,
            body=body,
        )
        if not dry_run:
            self._tell_written(created)
        return created

    def replace(self, body: Mapping[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        path = resource_path(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        replaced = self.request("PUT", path, query={"fieldManager": self.field_manager}, body=body)
        self._tell_written(replaced)
        return replaced

    def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply under `field_manager` (forced: the operator's fields are its own):
        creates the object or sets exactly the fields `body` states, leaving fields other
        managers own alone and removing those this manager applied before and no longer states.
        A `metadata.resourceVersion` in `body` is a precondition (Conflict when it moved)."""
        meta = body["metadata"]
        path = resource_path(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"])
        applied = self.request(
            "PATCH",
            path,
            query={"fieldManager": self.field_manager, "force": "true"},
            body=body,
            content_type="application/apply-patch+yaml",
        )
        self._tell_written(applied)
        return applied

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
        patched = self.request(
            "PATCH",
            path,
            query={"fieldManager": self.field_manager},
            body=patch,
            content_type="application/merge-patch+json",
        )
        self._tell_written(patched)
        return patched

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete; False when it was already gone."""
        try:
            answer = self.request(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except NotFound:
            return False
        meta = answer.get("metadata") or {}
        if answer.get("kind") == kind and meta.get("deletionTimestamp"):
            self._tell_written(answer)  # still there, terminating (grace period, finalizers)
        else:
            # The answer is a Status (details.uid) or, for some kinds, the object as it was.
            uid = (answer.get("details") or {}).get("uid") or meta.get("uid")
            for listener in self._write_listeners:
                self._tell(listener.deleted, api_version, kind, namespace, name, uid and str(uid))
        return True

    def _tell_written(self, obj: Mapping[str, Any]) -> None:
        for listener in self._write_listeners:
            self._tell(listener.written, obj)

    @staticmethod
    def _tell(method: Callable[..., None], *args: Any) -> None:
        try:
            method(*args)
        except Exception:  # a listener's bug must not turn a write that happened into a failure
            log.exception("write listener %r failed", method)
