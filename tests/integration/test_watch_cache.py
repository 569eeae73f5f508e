"""The operator's watch caches against the real API server: they follow creates, updates and
deletes; the server filters by label (what the watch received is checked, not only what the
cache holds); a noted write shows at once and no older event undoes it; a broken watch or an
expired resourceVersion relists and reports what was deleted meanwhile; a policy's change stamp
across the kinds follows its own objects through a broken watch; the auth Secret's watch sees a
rotation without a GET per read."""

from __future__ import annotations

import base64
import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from groupops.controller.cache import CACHED_KINDS, Caches, WatchCache
from groupops.controller.metrics import Metrics
from groupops.controller.names import LABEL_MANAGED_BY, LABEL_POLICY, MANAGED_BY
from groupops.kubeapi import Expired, KubeClient, WatchStream
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.no_time_bound]

MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
GATE_S = 60.0


class RecordingClient(KubeClient):
    """A KubeClient that records everything its LISTs and watches received, and lets a test hold
    a LIST, a watch or the delivery of events, or make the next watch start from resourceVersion
    "1" (older than the API server keeps: 410 Gone)."""

    def __init__(self, api: k8s_client.ApiClient) -> None:
        super().__init__(api)
        self.received: list[dict[str, Any]] = []
        self.streams: list[WatchStream] = []
        self.expired = 0
        self.expire_next_watch = False
        self.list_gate, self.watch_gate, self.event_gate = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        for gate in (self.list_gate, self.watch_gate, self.event_gate):
            gate.set()

    def list_at(self, *args: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        assert self.list_gate.wait(GATE_S)
        items, version = super().list_at(*args, **kwargs)
        self.received.extend(copy.deepcopy(items))
        return items, version

    def watch(self, *args: Any, resource_version: str, **kwargs: Any) -> WatchStream:
        assert self.watch_gate.wait(GATE_S)
        if self.expire_next_watch:
            self.expire_next_watch, resource_version = False, "1"
        try:
            stream = super().watch(*args, resource_version=resource_version, **kwargs)
        except Expired:  # some servers answer 410 at once instead of in an ERROR event
            self.expired += 1
            raise
        self.streams.append(stream)
        return _Recorded(stream, self)  # type: ignore[return-value]

    def names_received(self) -> set[str]:
        return {str(obj["metadata"]["name"]) for obj in self.received if "metadata" in obj}


class _Recorded:
    def __init__(self, stream: WatchStream, client: RecordingClient) -> None:
        self._stream, self._client = stream, client

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for event in self._stream:
                assert self._client.event_gate.wait(GATE_S)
                self._client.received.append(copy.deepcopy(event.get("object") or {}))
                yield event
        except Expired:
            self._client.expired += 1
            raise

    def close(self) -> None:
        self._stream.close()


def api_client(kube_config: str) -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=kube_config, client_configuration=configuration)
    return k8s_client.ApiClient(configuration)


@pytest.fixture
def admin(kube_config: str) -> KubeClient:
    """Writes of the test itself: no cache hears of them except through its watch."""
    return KubeClient(api_client(kube_config))


@pytest.fixture
def recording(kube_config: str) -> RecordingClient:
    return RecordingClient(api_client(kube_config))


@pytest.fixture
def namespace(admin: KubeClient, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("cache")
    admin.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    try:
        yield name
    finally:
        # Without a controller-manager the namespace stays Terminating; its name is unique.
        admin.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def configmaps(
    recording: RecordingClient, namespace: str
) -> Iterator[tuple[WatchCache, list[tuple[str, str]]]]:
    """A ConfigMap cache of the namespace, as the operator's (filtered by managed-by), and the
    (event, name) its listener heard."""
    cache = WatchCache(recording, "v1", "ConfigMap", namespaces=(namespace,), label_selector=SELECTOR)
    heard: list[tuple[str, str]] = []
    cache.add_listener(lambda kind, obj: heard.append((kind, obj["metadata"]["name"])))
    yield cache, heard
    cache.stop()


def configmap(
    namespace: str, name: str, *, labels: dict[str, str] | None = None, **data: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(MANAGED if labels is None else labels),
        },
        "data": data,
    }


def lease(namespace: str, name: str, *, holder: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_POLICY: "p", **MANAGED}},
        "spec": {"holderIdentity": holder} if holder else {},
    }


def rv(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str(obj["metadata"]["resourceVersion"])


def test_the_cache_follows_creates_updates_and_deletes(
    admin: KubeClient, namespace: str, configmaps: tuple[WatchCache, list[tuple[str, str]]]
) -> None:
    cache, heard = configmaps
    admin.create(configmap(namespace, "before", v="0"))
    cache.start()
    assert cache.wait_synced(30)
    assert cache.get(namespace, "before") is not None, "the initial LIST"

    admin.create(configmap(namespace, "plan", v="1"))
    wait_for("the create", lambda: cache.get(namespace, "plan"), timeout=30)
    admin.patch("v1", "ConfigMap", namespace, "plan", {"data": {"v": "2"}})
    wait_for("the update", lambda: (cache.get(namespace, "plan") or {}).get("data") == {"v": "2"}, timeout=30)
    admin.delete("v1", "ConfigMap", namespace, "plan")
    wait_for("the delete", lambda: cache.get(namespace, "plan") is None, timeout=30)

    assert heard == [("ADDED", "before"), ("ADDED", "plan"), ("MODIFIED", "plan"), ("DELETED", "plan")]
    assert [obj["metadata"]["name"] for obj in cache.list(namespace)] == ["before"]


def test_objects_without_the_label_never_reach_the_operator(
    admin: KubeClient,
    recording: RecordingClient,
    namespace: str,
    configmaps: tuple[WatchCache, list[tuple[str, str]]],
) -> None:
    cache, _ = configmaps
    admin.create(configmap(namespace, "theirs-before", labels={}))
    cache.start()
    assert cache.wait_synced(30)
    admin.create(configmap(namespace, "theirs", labels={"app.kubernetes.io/managed-by": "helm"}))
    admin.patch("v1", "ConfigMap", namespace, "theirs", {"data": {"v": "2"}})
    admin.create(configmap(namespace, "ours"))
    wait_for("our ConfigMap", lambda: cache.get(namespace, "ours"), timeout=30)

    assert "ours" in recording.names_received()
    assert not {"theirs", "theirs-before"} & recording.names_received(), "filtered on the server"
    assert cache.get(namespace, "theirs") is None


def test_a_cache_handed_out_object_cannot_be_changed_by_its_reader(
    admin: KubeClient, namespace: str, configmaps: tuple[WatchCache, list[tuple[str, str]]]
) -> None:
    cache, _ = configmaps
    admin.create(configmap(namespace, "plan", v="1"))
    cache.start()
    assert cache.wait_synced(30)
    read = cache.get(namespace, "plan")
    assert read is not None
    read["data"]["v"] = "changed by the reader"
    cache.list(namespace)[0]["data"]["v"] = "changed too"
    assert (cache.get(namespace, "plan") or {}).get("data") == {"v": "1"}


def test_a_noted_write_is_visible_at_once_and_no_older_event_replaces_it(
    admin: KubeClient, recording: RecordingClient, namespace: str
) -> None:
    caches = Caches(recording, namespaces=(namespace,))
    recording.add_write_listener(caches)
    leases = caches.leases
    seen_at_each_event: list[tuple[str | None, str | None]] = []
    leases.add_listener(
        lambda _, obj: seen_at_each_event.append((rv(obj), rv(leases.get(namespace, "p-g-0"))))
    )
    caches.start()
    try:
        assert caches.wait_synced(30)
        first = admin.create(lease(namespace, "p-g-0"))
        wait_for("the Lease", lambda: rv(leases.get(namespace, "p-g-0")) == rv(first), timeout=30)

        recording.event_gate.clear()  # the watch falls behind: what it reads waits here
        renewal = admin.replace({**first, "spec": {"holderIdentity": "g-0"}})  # the consumer's
        fenced = recording.replace(
            {**renewal, "metadata": {**renewal["metadata"], "annotations": {"x": "fenced"}}}
        )
        assert rv(leases.get(namespace, "p-g-0")) == rv(fenced), "visible at once"
        recording.event_gate.set()

        wait_for(
            "the watch to deliver the write",
            lambda: (rv(fenced), rv(fenced)) in seen_at_each_event,
            timeout=30,
        )
        assert (rv(renewal), rv(fenced)) in seen_at_each_event, "the older event came, and changed nothing"
        assert rv(leases.get(namespace, "p-g-0")) == rv(fenced)
        from_api = recording.get("coordination.k8s.io/v1", "Lease", namespace, "p-g-0")
        assert from_api is not None and from_api["metadata"].pop("managedFields"), "the server keeps them"
        assert from_api == leases.get(namespace, "p-g-0"), "the cache holds the rest of the server's object"
    finally:
        caches.stop()


def test_a_broken_watch_relists_and_reports_what_was_deleted_meanwhile(
    admin: KubeClient,
    recording: RecordingClient,
    namespace: str,
    configmaps: tuple[WatchCache, list[tuple[str, str]]],
) -> None:
    cache, heard = configmaps
    for name in ("a", "b", "c"):
        admin.create(configmap(namespace, name, v="1"))
    cache.start()
    assert cache.wait_synced(30)
    wait_for("a watch to be open", lambda: recording.streams, timeout=30)

    recording.list_gate.clear()  # the relist waits until the changes are made
    recording.streams[-1].close()  # the connection breaks
    wait_for("the cache to notice", lambda: not cache.synced(), timeout=30)
    admin.delete("v1", "ConfigMap", namespace, "b")
    admin.patch("v1", "ConfigMap", namespace, "c", {"data": {"v": "2"}})
    admin.create(configmap(namespace, "d", v="1"))
    assert cache.get(namespace, "b") is not None, "not known yet: the watch is down"
    heard.clear()
    recording.list_gate.set()

    assert cache.wait_synced(30)
    assert sorted(heard) == [("ADDED", "d"), ("DELETED", "b"), ("MODIFIED", "c")]
    assert [obj["metadata"]["name"] for obj in cache.list(namespace)] == ["a", "c", "d"]
    assert (cache.get(namespace, "c") or {}).get("data") == {"v": "2"}


def test_a_policys_stamp_moves_for_its_own_objects_only_even_for_a_change_made_while_every_watch_was_down(
    admin: KubeClient, recording: RecordingClient, namespace: str
) -> None:
    """`Caches.versions` of one policy (its settled check's input, one stamp across the kinds):
    another policy's change leaves it; every watch broken, it is unknown (None) until they
    relist; a relist that found nothing new leaves it; a change of the policy's Lease made while
    the watches were down moves it once they relist."""
    caches = Caches(recording, namespaces=(namespace,))
    owned = f"{LABEL_POLICY}=p"
    configs = caches.cache("ConfigMap")

    opened = [0]  # watches opened when the last break began

    def break_every_watch() -> None:
        # a cache is synced once its LIST is in; its watch opens just after
        wait_for("every kind's watch open", lambda: len(recording.streams) >= opened[0] + len(CACHED_KINDS))
        opened[0] = len(recording.streams)
        recording.list_gate.clear()  # the relists wait until the test lets them
        for stream in list(recording.streams):
            stream.close()
        wait_for(
            "every cache to notice",
            lambda: not any(caches.cache(kind.kind).synced() for kind in CACHED_KINDS),
            timeout=30,
        )
        assert caches.versions(namespace, owned) is None, "unknown while the watches are down"

    caches.start()
    try:
        assert caches.wait_synced(30)
        admin.create(lease(namespace, "p-g-0"))
        admin.create(configmap(namespace, "p-plan", labels={LABEL_POLICY: "p", **MANAGED}, v="1"))
        admin.create(configmap(namespace, "q-plan", labels={LABEL_POLICY: "q", **MANAGED}, v="1"))
        wait_for(
            "the three objects cached",
            lambda: all(
                cached is not None
                for cached in (
                    caches.leases.get(namespace, "p-g-0"),
                    configs.get(namespace, "p-plan"),
                    configs.get(namespace, "q-plan"),
                )
            ),
            timeout=30,
        )
        before = caches.versions(namespace, owned)
        assert before is not None

        admin.patch("v1", "ConfigMap", namespace, "q-plan", {"data": {"v": "2"}})
        wait_for(
            "q's change cached", lambda: (configs.get(namespace, "q-plan") or {}).get("data") == {"v": "2"}
        )
        assert caches.versions(namespace, owned) == before, "another policy's change moved p's stamp"

        break_every_watch()
        recording.list_gate.set()
        assert caches.wait_synced(30)
        assert caches.versions(namespace, owned) == before, "a relist that found nothing new moved it"

        break_every_watch()
        admin.patch(
            "coordination.k8s.io/v1", "Lease", namespace, "p-g-0", {"spec": {"holderIdentity": "g-0"}}
        )
        recording.list_gate.set()
        assert caches.wait_synced(30)
        after = caches.versions(namespace, owned)
        assert after is not None and after != before, "a change made while the watches were down went unseen"
    finally:
        recording.list_gate.set()
        caches.stop()


def test_an_expired_resource_version_relists_and_reports_what_was_deleted_meanwhile(
    admin: KubeClient,
    recording: RecordingClient,
    namespace: str,
    configmaps: tuple[WatchCache, list[tuple[str, str]]],
) -> None:
    cache, heard = configmaps
    for name in ("a", "b"):
        admin.create(configmap(namespace, name, v="1"))
    recording.watch_gate.clear()
    recording.expire_next_watch = True
    cache.start()
    assert cache.wait_synced(30)
    admin.delete("v1", "ConfigMap", namespace, "b")
    heard.clear()
    recording.watch_gate.set()  # the watch starts from resourceVersion "1": 410 Gone

    wait_for("the relist to drop b", lambda: cache.get(namespace, "b") is None, timeout=30)
    assert recording.expired == 1
    assert heard == [("DELETED", "b")]
    assert [obj["metadata"]["name"] for obj in cache.list(namespace)] == ["a"]


def test_the_auth_secret_is_watched_by_name_and_its_rotation_seen_without_a_get(
    admin: KubeClient, recording: RecordingClient, namespace: str
) -> None:
    metrics = Metrics()
    recording.count_requests(metrics.count_request)
    caches = Caches(recording, namespaces=(namespace,), metrics=metrics)

    def secret(password: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kafka-auth", "namespace": namespace},
            "data": {"sasl.password": base64.b64encode(password.encode()).decode()},
        }

    def password() -> str:
        found = caches.get("v1", "Secret", namespace, "kafka-auth") or {}
        return base64.b64decode((found.get("data") or {}).get("sasl.password", "")).decode()

    def requests(verb: str) -> float:
        return (
            metrics.registry.get_sample_value(
                "groupops_operator_api_requests_total", {"verb": verb, "kind": "Secret"}
            )
            or 0.0
        )

    admin.create(secret("first"))
    admin.create({**secret("other"), "metadata": {"name": "unrelated", "namespace": namespace}})
    try:
        assert password() == "first", "the first read: from the API while the watch starts"
        watch = caches.cache_of("Secret", namespace, "kafka-auth")
        assert watch is not None and watch.wait_synced(30)
        gets = requests("get")
        assert gets == 1

        admin.replace(secret("rotated"))
        wait_for("the rotation", lambda: password() == "rotated", timeout=30)
        assert requests("get") == gets, "no GET per read"
        assert requests("watch") >= 1 and requests("list") >= 1
        assert "unrelated" not in recording.names_received(), "watched by name"
    finally:
        caches.stop()
