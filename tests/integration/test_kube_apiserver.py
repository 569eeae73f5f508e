"""The real kube-apiserver (with etcd) built from the Kubernetes Go modules: the installed kubectl
talks to it with the static admin token, it accepts a CRD and a custom resource through
`kubectl apply`, and a watch through the kubernetes Python client sees the events."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from groupops.devstack.paths import K8S_VERSION
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.no_time_bound]

Event = tuple[str, dict[str, Any]]
VERSION = "v1alpha1"
PLURAL = "widgets"


def kubectl(kube_config: str, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl must be installed (the issue requires the installed one)"
    result = subprocess.run(
        [binary, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": kube_config},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result.stdout


def crd_manifest(group: str) -> str:
    return json.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{PLURAL}.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": VERSION,
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {"size": {"type": "integer", "minimum": 1}},
                                        "required": ["size"],
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )


def widget_manifest(group: str, namespace: str, name: str, size: int) -> str:
    return json.dumps(
        {
            "apiVersion": f"{group}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"size": size},
        }
    )


def established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@pytest.fixture
def widget_crd(kube_config: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A CRD of its own (cluster-scoped, so the group name is unique per test); its API group."""
    group = f"{unique_name('w')}.groupops.test"
    kubectl(kube_config, "apply", "-f", "-", stdin=crd_manifest(group))
    # Polled, not `kubectl wait --for=condition=Established`: that fails at once when it reads the
    # CRD before the API server wrote its first condition (seen in CI).
    name = f"{PLURAL}.{group}"
    wait_for(
        "the CRD Established",
        lambda: established(json.loads(kubectl(kube_config, "get", "crd", name, "-o", "json"))),
        60,
        interval=0.2,
    )
    try:
        yield group
    finally:
        kubectl(kube_config, "delete", "crd", f"{PLURAL}.{group}", "--wait=false")


@pytest.fixture
def namespace(kube_config: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("ns")
    kubectl(kube_config, "create", "namespace", name)
    try:
        yield name
    finally:
        # Without a controller-manager the namespace stays Terminating; its name is unique.
        kubectl(kube_config, "delete", "namespace", name, "--wait=false")


def test_installed_kubectl_talks_to_the_pinned_api_server_with_the_admin_token(kube_config: str) -> None:
    versions = json.loads(kubectl(kube_config, "version", "-o", "json"))
    assert versions["serverVersion"]["gitVersion"] == f"v{K8S_VERSION}"
    review = json.loads(kubectl(kube_config, "auth", "whoami", "-o", "json"))
    assert review["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in review["status"]["userInfo"]["groups"]
    assert kubectl(kube_config, "auth", "can-i", "create", "customresourcedefinitions").strip() == "yes"


def test_schema_rejects_an_invalid_custom_resource(kube_config: str, widget_crd: str, namespace: str) -> None:
    binary = shutil.which("kubectl")
    assert binary is not None
    result = subprocess.run(
        [binary, "apply", "-f", "-"],
        input=widget_manifest(widget_crd, namespace, "tiny", 0),
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": kube_config},
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "spec.size" in result.stderr


def test_a_watch_through_the_python_client_sees_resources_applied_with_kubectl(
    kube_config: str, widget_crd: str, namespace: str
) -> None:
    # The kubernetes client is only partly annotated: its objects are handled as Any here.
    api_client: Any = config.new_client_from_config(config_file=kube_config)  # type: ignore[no-untyped-call]
    custom = client.CustomObjectsApi(api_client)
    listing: Any = custom.list_namespaced_custom_object(widget_crd, VERSION, namespace, PLURAL)
    start_version = listing["metadata"]["resourceVersion"]
    events: queue.Queue[Event | BaseException] = queue.Queue()
    watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]

    def follow() -> None:
        try:
            for event in watcher.stream(
                custom.list_namespaced_custom_object,
                widget_crd,
                VERSION,
                namespace,
                PLURAL,
                resource_version=start_version,
                timeout_seconds=60,
            ):
                events.put((event["type"], event["object"]))
        except BaseException as e:  # handed to the test thread, which re-raises it
            events.put(e)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        kubectl(kube_config, "apply", "-f", "-", stdin=widget_manifest(widget_crd, namespace, "gizmo", 3))
        kind, obj = _next_event(events)
        assert (kind, obj["metadata"]["name"], obj["spec"]["size"]) == ("ADDED", "gizmo", 3)

        kubectl(kube_config, "apply", "-f", "-", stdin=widget_manifest(widget_crd, namespace, "gizmo", 5))
        kind, obj = _next_event(events)
        assert (kind, obj["metadata"]["name"], obj["spec"]["size"]) == ("MODIFIED", "gizmo", 5)

        kubectl(kube_config, "delete", PLURAL + "." + widget_crd, "gizmo", "-n", namespace)
        kind, obj = _next_event(events)
        assert (kind, obj["metadata"]["name"]) == ("DELETED", "gizmo")
    finally:
        watcher.stop()
        thread.join(timeout=70)
        api_client.close()


def _next_event(
    events: queue.Queue[tuple[str, dict[str, Any]] | BaseException],
) -> tuple[str, dict[str, Any]]:
    item = events.get(timeout=30)
    if isinstance(item, BaseException):
        raise item
    return item
