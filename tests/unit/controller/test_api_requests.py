"""Every request of the operator is counted as (verb, kind), every write it makes reaches the
watch caches, and the caches read from the API (counted) while they are not synced."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from groupops.controller.cache import Caches
from groupops.controller.metrics import Metrics
from groupops.kubeapi import Conflict, KubeClient, describe_request


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        pytest.param("GET", "/api/v1/namespaces/a/configmaps/p-plan", None, ("get", "ConfigMap"), id="get"),
        pytest.param("GET", "/api/v1/namespaces/a/pods", None, ("list", "Pod"), id="list"),
        pytest.param(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases",
            {"watch": "true"},
            ("watch", "Lease"),
            id="watch",
        ),
        pytest.param(
            "GET", "/apis/coordination.k8s.io/v1/leases", None, ("list", "Lease"), id="cluster-wide"
        ),
        pytest.param("POST", "/api/v1/namespaces/a/events", None, ("create", "Event"), id="create"),
        pytest.param(
            "PUT",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles/r",
            None,
            ("update", "Role"),
            id="update",
        ),
        pytest.param(
            "PATCH",
            "/apis/groupops.dev/v1alpha1/namespaces/a/consumergrouppolicies/p/status",
            None,
            ("patch", "ConsumerGroupPolicy"),
            id="patch of a subresource",
        ),
        pytest.param("DELETE", "/api/v1/namespaces/a/pods/p-0", None, ("delete", "Pod"), id="delete"),
        pytest.param(
            "DELETE", "/api/v1/namespaces/a/pods", None, ("deletecollection", "Pod"), id="collection"
        ),
        pytest.param("GET", "/api/v1/namespaces/a", None, ("get", "namespaces"), id="a namespace"),
        pytest.param("GET", "/api/v1/nodes", None, ("list", "nodes"), id="a kind not ours"),
    ],
)
def test_requests_are_described_by_rbac_verb_and_kind(
    method: str, path: str, query: dict[str, str] | None, expected: tuple[str, str]
) -> None:
    assert describe_request(method, path, query) == expected


# -- KubeClient against a scripted API client ----------------------------------------------------


@dataclass
class Answer:
    status: int
    body: dict[str, Any]

    def read(self) -> bytes:
        return json.dumps(self.body).encode()


@dataclass
class ScriptedApi:
    """Stands in for kubernetes.client.ApiClient: answers from `answers`, in order."""

    answers: list[Answer]
    sent: list[tuple[str, str]] = field(default_factory=list)

    def param_serialize(self, *, method: str, resource_path: str, **_: Any) -> tuple[Any, ...]:
        return method, resource_path, {}, None, None

    def call_api(self, method: str, url: str, **_: Any) -> Answer:
        self.sent.append((method, url))
        return self.answers.pop(0)


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def written(self, obj: Any) -> None:
        self.events.append(
            ("written", obj["kind"], obj["metadata"]["name"], obj["metadata"]["resourceVersion"])
        )

    def deleted(self, api_version: str, kind: str, namespace: str | None, name: str, uid: str | None) -> None:
        self.events.append(("deleted", kind, name, str(uid)))


def client_with(*answers: Answer) -> tuple[KubeClient, ScriptedApi, Listener, Metrics]:
    api = ScriptedApi(list(answers))
    client = KubeClient(api)  # type: ignore[arg-type]
    listener, metrics = Listener(), Metrics()
    client.add_write_listener(listener)
    client.count_requests(metrics.count_request)
    return client, api, listener, metrics


def counted(metrics: Metrics, verb: str, kind: str) -> float:
    value = metrics.registry.get_sample_value(
        "groupops_operator_api_requests_total", {"verb": verb, "kind": kind}
    )
    return value or 0.0


def cm(rv: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "p-plan", "namespace": "a", "resourceVersion": rv, **meta},
    }


def test_writes_reach_the_listener_with_the_servers_answer_and_are_counted() -> None:
    client, _, listener, metrics = client_with(
        Answer(201, cm("5")), Answer(200, cm("6")), Answer(200, cm("7"))
    )
    client.create(cm(""))
    client.replace(cm("5"))
    client.patch("v1", "ConfigMap", "a", "p-plan", {"data": {}})
    assert listener.events == [
        ("written", "ConfigMap", "p-plan", "5"),
        ("written", "ConfigMap", "p-plan", "6"),
        ("written", "ConfigMap", "p-plan", "7"),
    ]
    assert (counted(metrics, "create", "ConfigMap"), counted(metrics, "update", "ConfigMap")) == (1, 1)
    assert counted(metrics, "patch", "ConfigMap") == 1


def test_a_dry_run_is_not_a_write() -> None:
    client, _, listener, _ = client_with(Answer(201, cm("5")))
    client.create(cm(""), dry_run=True)
    assert listener.events == []


def test_a_deletion_answered_with_a_status_is_noted_as_gone_with_its_uid() -> None:
    status = {"kind": "Status", "status": "Success", "details": {"name": "p-plan", "uid": "u1"}}
    client, _, listener, metrics = client_with(Answer(200, status))
    assert client.delete("v1", "ConfigMap", "a", "p-plan")
    assert listener.events == [("deleted", "ConfigMap", "p-plan", "u1")]
    assert counted(metrics, "delete", "ConfigMap") == 1


def test_a_deletion_that_leaves_the_object_terminating_is_noted_as_written() -> None:
    terminating = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "a", "resourceVersion": "9", "deletionTimestamp": "x"},
    }
    client, _, listener, _ = client_with(Answer(200, terminating))
    client.delete("v1", "Pod", "a", "p-0")
    assert listener.events == [("written", "Pod", "p-0", "9")]


def test_a_failed_write_reaches_no_listener() -> None:
    client, _, listener, metrics = client_with(Answer(409, {"reason": "Conflict", "message": "stale"}))
    with pytest.raises(Conflict):
        client.replace(cm("5"))
    assert listener.events == []
    assert counted(metrics, "update", "ConfigMap") == 1, "a request that failed was still made"


# -- the caches before they are synced -----------------------------------------------------------


def test_caches_that_are_not_synced_read_from_the_api_and_count_it() -> None:
    client, api, _, metrics = client_with(Answer(200, cm("5")), Answer(200, {"items": [cm("5")]}))
    caches = Caches(client, namespaces=("a",), metrics=metrics)  # never started: never synced
    assert caches.get("v1", "ConfigMap", "a", "p-plan") is not None
    assert [item["kind"] for item in caches.list("v1", "ConfigMap", "a")] == ["ConfigMap"]
    assert api.sent == [
        ("GET", "/api/v1/namespaces/a/configmaps/p-plan"),
        ("GET", "/api/v1/namespaces/a/configmaps"),
    ]
    assert (
        metrics.registry.get_sample_value("groupops_operator_cache_fallbacks_total", {"kind": "ConfigMap"})
        == 2
    )


def test_a_namespace_not_watched_is_read_from_the_api() -> None:
    client, api, _, _ = client_with(Answer(200, cm("5")))
    caches = Caches(client, namespaces=("a",))
    caches.cache("ConfigMap")._streams[0].synced.set()  # as if its LIST had come back
    caches.get("v1", "ConfigMap", "elsewhere", "p-plan")
    assert api.sent == [("GET", "/api/v1/namespaces/elsewhere/configmaps/p-plan")]


def test_a_synced_cache_answers_from_memory_with_copies_and_shows_writes_at_once() -> None:
    client, api, _, _ = client_with(Answer(201, cm("5", labels={"app.kubernetes.io/managed-by": "groupops"})))
    caches = Caches(client, namespaces=("a",))
    client.add_write_listener(caches)
    caches.cache("ConfigMap")._streams[0].synced.set()
    client.create(cm(""))
    read = caches.get("v1", "ConfigMap", "a", "p-plan")
    assert read is not None and read["metadata"]["resourceVersion"] == "5"
    read["metadata"]["resourceVersion"] = "corrupted"
    again = caches.get("v1", "ConfigMap", "a", "p-plan")
    assert again is not None and again["metadata"]["resourceVersion"] == "5"
    assert api.sent == [("POST", "/api/v1/namespaces/a/configmaps")], "no read went to the API"


def test_a_cache_read_is_a_deep_copy_at_every_depth() -> None:
    labels = {"app.kubernetes.io/managed-by": "groupops"}
    stored = cm("7", labels=labels)
    stored["data"] = {"plan": "x"}
    stored["metadata"]["ownerReferences"] = [{"name": "p", "controller": True, "nested": [[1, 2.5, None]]}]
    client, _, _, _ = client_with(Answer(201, stored))
    caches = Caches(client, namespaces=("a",))
    client.add_write_listener(caches)
    caches.cache("ConfigMap")._streams[0].synced.set()
    client.create(cm(""))
    expected = copy.deepcopy(stored)
    first = caches.list("v1", "ConfigMap", "a")
    assert first == [expected]
    first[0]["metadata"]["ownerReferences"][0]["nested"][0].append("changed")
    first[0]["data"]["plan"] = "changed"
    first[0]["metadata"]["labels"]["extra"] = "changed"
    assert caches.list("v1", "ConfigMap", "a") == [expected]


def test_a_cache_keeps_no_managed_fields_and_the_answer_keeps_its_own() -> None:
    answer = cm("9", labels={"app.kubernetes.io/managed-by": "groupops"})
    answer["metadata"]["managedFields"] = [{"manager": "groupops", "operation": "Update"}]
    client, _, _, _ = client_with(Answer(201, answer))
    caches = Caches(client, namespaces=("a",))
    client.add_write_listener(caches)
    caches.cache("ConfigMap")._streams[0].synced.set()
    written = client.create(cm(""))
    assert written["metadata"]["managedFields"] == [{"manager": "groupops", "operation": "Update"}]
    read = caches.get("v1", "ConfigMap", "a", "p-plan")
    assert read is not None and "managedFields" not in read["metadata"]
    assert read["metadata"]["resourceVersion"] == "9"
