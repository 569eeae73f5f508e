"""An in-memory stand-in for `KubeClient` for the reconcile's unit tests: objects by
(kind, namespace, name), resourceVersions, equality label selectors, JSON merge patches.
Unit level only; the e2e tests run the real API server."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from groupops.kubeapi import AlreadyExists, Conflict, NotFound


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.writes: list[tuple[str, str, str]] = []

    def _key(self, kind: str, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (kind, namespace or "", name)

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        return obj

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        found = self.objects.get(self._key(kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        wanted = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind
            and ns == (namespace or "")
            and all((obj["metadata"].get("labels") or {}).get(a) == b for a, b in wanted.items())
        ]

    def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        meta = obj["metadata"]
        if "generateName" in meta and "name" not in meta:
            meta["name"] = f"{meta['generateName']}{next(self.versions)}"
        key = self._key(obj["kind"], meta.get("namespace"), meta["name"])
        if key in self.objects:
            raise AlreadyExists(f"{key} exists", status=409, reason="AlreadyExists")
        self.objects[key] = self._stamp(obj)
        self.writes.append(("create", obj["kind"], meta["name"]))
        return copy.deepcopy(obj)

    def replace(self, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        meta = obj["metadata"]
        key = self._key(obj["kind"], meta.get("namespace"), meta["name"])
        current = self.objects.get(key)
        if current is None:
            raise NotFound(f"{key}", status=404)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{key} changed", status=409, reason="Conflict")
        if "status" in current and "status" not in obj:
            obj["status"] = current["status"]
        self.objects[key] = self._stamp(obj)
        self.writes.append(("replace", obj["kind"], meta["name"]))
        return copy.deepcopy(obj)

    def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply, as far as the reconcile relies on it: create, or set the stated
        fields (a stated resourceVersion is a precondition)."""
        meta = body["metadata"]
        key = self._key(body["kind"], meta.get("namespace"), meta["name"])
        current = self.objects.get(key)
        if current is None:
            obj = copy.deepcopy(dict(body))
            obj["metadata"].pop("resourceVersion", None)
            self.objects[key] = self._stamp(obj)
            self.writes.append(("apply", obj["kind"], meta["name"]))
            return copy.deepcopy(obj)
        wanted_version = meta.get("resourceVersion")
        if wanted_version is not None and wanted_version != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{key} changed", status=409, reason="Conflict")
        merge(current, {k: v for k, v in body.items() if k != "metadata"})
        merge(current["metadata"], {k: v for k, v in meta.items() if k != "resourceVersion"})
        self._stamp(current)
        self.writes.append(("apply", body["kind"], meta["name"]))
        return copy.deepcopy(current)

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
        key = self._key(kind, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise NotFound(f"{key}", status=404)
        wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_version is not None and wanted_version != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{key} changed", status=409, reason="Conflict")
        if subresource == "status":
            patch = {"status": patch["status"]}
        merge(current, patch)
        if kind == "ConsumerGroupPolicy" and subresource is None and "spec" in patch:
            current["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        self._stamp(current)
        self.writes.append((f"patch{'/' + subresource if subresource else ''}", kind, name))
        return copy.deepcopy(current)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        found = self.objects.pop(self._key(kind, namespace, name), None)
        if found is not None:
            self.writes.append(("delete", kind, name))
        return found is not None

    # -- test helpers --------------------------------------------------------------------------

    def put_policy(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        key = self._key("ConsumerGroupPolicy", namespace, name)
        current = self.objects.get(key)
        if current is None:
            obj = {
                "apiVersion": "groupops.dev/v1alpha1",
                "kind": "ConsumerGroupPolicy",
                "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1},
                "spec": copy.deepcopy(spec),
            }
            self.objects[key] = self._stamp(obj)
            return copy.deepcopy(obj)
        return self.patch(
            "groupops.dev/v1alpha1", "ConsumerGroupPolicy", namespace, name, {"spec": None}
        ) and self.patch("groupops.dev/v1alpha1", "ConsumerGroupPolicy", namespace, name, {"spec": spec})

    def policy(self, namespace: str, name: str) -> dict[str, Any]:
        found = self.get("groupops.dev/v1alpha1", "ConsumerGroupPolicy", namespace, name)
        assert found is not None
        return found

    def names(self, kind: str, namespace: str = "ns") -> list[str]:
        return sorted(name for (k, ns, name) in self.objects if k == kind and ns == namespace)
