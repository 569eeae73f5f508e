"""The chart's tests' tools: helm (the project's build, found as the e2e tests find it), a
renderer that returns the parsed manifest, and a small RBAC evaluator that answers "may the
operator's ServiceAccount do this?" from the rendered Roles and bindings, the way the API server's
RBAC authorizer does (rules are additive; resourceNames restrict; a RoleBinding grants only in its
namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.operator_support import CHART, KUBETOOLS_DEFAULT, ROOT

__all__ = [
    "CHART",
    "NAMESPACE",
    "RELEASE",
    "ROOT",
    "Access",
    "Chart",
    "RenderError",
    "find",
    "helm_path",
    "may",
    "named",
    "rules_of",
]

KUBE_VERSION = "1.33.13"
RELEASE = "groupops"
NAMESPACE = "ops"


def helm_path() -> Path:
    """$GROUPOPS_KUBETOOLS/helm (mk/helm.mk), never a helm that happens to be on PATH."""
    return Path(os.environ.get("GROUPOPS_KUBETOOLS", KUBETOOLS_DEFAULT)) / "helm"


class RenderError(AssertionError):
    pass


@dataclass(frozen=True)
class Chart:
    """The chart at `path`, rendered and linted by `helm`."""

    helm: Path
    path: Path = CHART

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.helm), *args], capture_output=True, text=True, timeout=120, check=False
        )

    def render(
        self, values: Mapping[str, Any] | None = None, *, namespace: str = NAMESPACE, release: str = RELEASE
    ) -> list[dict[str, Any]]:
        """The manifest `helm template` renders with `values`, as parsed documents."""
        result = self.template(values, namespace=namespace, release=release)
        if result.returncode != 0:
            raise RenderError(f"helm template failed: {result.stderr.strip()}")
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    def refusal(self, values: Mapping[str, Any], *, namespace: str = NAMESPACE) -> str:
        """helm's error for `values`, which the chart must refuse."""
        result = self.template(values, namespace=namespace)
        assert result.returncode != 0, f"the chart accepted {values!r}"
        return result.stderr

    def template(
        self, values: Mapping[str, Any] | None, *, namespace: str = NAMESPACE, release: str = RELEASE
    ) -> subprocess.CompletedProcess[str]:
        return _template(self.helm, self.path, json.dumps(values or {}, sort_keys=True), namespace, release)

    def notes(self, values: Mapping[str, Any] | None, tmp_path: Path) -> str:
        """NOTES.txt as `helm install` prints it. helm template does not render NOTES and a client
        dry-run install still wants a cluster, so a copy of the chart renders it into a ConfigMap."""
        copy = tmp_path / "groupops"
        shutil.copytree(self.path, copy)
        shutil.copy(copy / "templates" / "NOTES.txt", copy / "notes.txt")
        (copy / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            'data: {notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}}\n'
        )
        docs = Chart(self.helm, copy).render(values)
        return str(find(docs, "ConfigMap", "notes")["data"]["notes"])


@cache
def _template(
    helm: Path, chart: Path, values_json: str, namespace: str, release: str
) -> subprocess.CompletedProcess[str]:
    """One `helm template` per distinct input (the renders are pure; many tests share one)."""
    return subprocess.run(
        [
            str(helm),
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            "--values",
            "-",
        ],
        input=values_json,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def named(docs: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def find(docs: Iterable[Mapping[str, Any]], kind: str, name: str | None = None) -> Mapping[str, Any]:
    matches = [doc for doc in named(docs, kind) if name is None or doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name!r}"
    return matches[0]


# -- RBAC ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """One request, as the RBAC authorizer sees it. namespace None: a cluster-scoped resource.
    name: the object's name (a get, or a list/watch with fieldSelector metadata.name=<name>)."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None = None


def _rule_allows(rule: Mapping[str, Any], access: Access) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (
        has("verbs", access.verb) and has("apiGroups", access.group) and has("resources", access.resource)
    ):
        return False
    names = rule.get("resourceNames")
    return not names or access.name in names


def _binds(binding: Mapping[str, Any], account: str, account_namespace: str) -> bool:
    return any(
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == account
        and subject.get("namespace") == account_namespace
        for subject in binding.get("subjects") or []
    )


def may(
    docs: list[dict[str, Any]], access: Access, *, account: str = RELEASE, account_namespace: str = NAMESPACE
) -> bool:
    """Whether the rendered RBAC lets the ServiceAccount `account` make the request `access`."""
    roles = {(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]): doc for doc in docs}
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not _binds(binding, account, account_namespace):
            continue
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        if where is not None and access.namespace != where:
            continue  # a RoleBinding grants only in its own namespace, never cluster-scoped resources
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], where if ref["kind"] == "Role" else None, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} binds a missing {ref}"
        if any(_rule_allows(rule, access) for rule in role.get("rules") or []):
            return True
    return False


def rules_of(docs: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(kind, name, rule) of every rule of every Role and ClusterRole."""
    return [
        (doc["kind"], doc["metadata"]["name"], rule)
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc.get("rules") or []
    ]
