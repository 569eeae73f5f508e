"""The reconcile's lag step with a `prometheus` policy: its bearer token comes from a Secret of the
policy's namespace, partition counts from the policy's Kafka connection (the operator's readers),
and a new group the exporter has not seen yet is planned on those counts with lag 0: its replicas
start, and `Degraded=True NoLagSeries` says why until series appear."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from groupops.controller.reconcile import PolicyMemory, ReconcileFailure
from groupops.lag.kafka import KafkaLagSettings
from tests.fixtures.json_http import JsonHandler, serving
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.reconcile_support import reconcile_with_readers

TOKEN = "prom-reader-token-2718"


class Exporter(JsonHandler):
    """Prometheus answering the instant query with `series` (topic, partition, lag), if the
    request carries the bearer token."""

    series: ClassVar[list[tuple[str, int, int]]] = []
    authorizations: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        Exporter.authorizations.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_json(401, {"status": "error"})
            return
        result = [
            {"metric": {"topic": t, "partition": str(p)}, "value": [0, str(lag)]} for t, p, lag in self.series
        ]
        self.send_json(200, {"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
def prometheus() -> Iterator[str]:
    Exporter.series, Exporter.authorizations = [], []
    with serving(Exporter) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


class CountingReaders:
    """Stands in for `KafkaClusterReaders`: partition counts of the policy's connection."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts
        self.asked: list[tuple[KafkaLagSettings, list[str]]] = []

    def partition_counts(self, settings: KafkaLagSettings, topics: Sequence[str]) -> dict[str, int]:
        self.asked.append((settings, list(topics)))
        return {topic: self.counts[topic] for topic in topics if topic in self.counts}


def policy_spec(url: str, secret: str = "prom-token") -> dict[str, Any]:
    return {
        "kafka": {"bootstrapServers": "k1:9092", "properties": {"client.rack": "r1"}},
        "groupId": "g",
        "topics": ["t"],
        "strategy": {"type": "lag"},
        "lagSource": {
            "type": "prometheus",
            "prometheus": {"url": url, "auth": {"bearerToken": {"secretName": secret, "key": "token"}}},
        },
        "consumers": {"replicas": 3},
    }


def put_secret(kube: FakeKube, name: str, data: Mapping[str, str]) -> None:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    kube.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ns"}, "data": encoded}
    )


def run(kube: FakeKube, readers: CountingReaders, memory: PolicyMemory) -> Any:
    return reconcile_with_readers(kube, readers, memory)


def conditions(kube: FakeKube) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in kube.policy("ns", "p")["status"]["conditions"]
    }


def test_a_new_group_without_series_is_planned_on_partition_counts_and_says_why(prometheus: str) -> None:
    kube, readers, memory = FakeKube(), CountingReaders({"t": 6}), PolicyMemory()
    kube.put_policy("ns", "p", policy_spec(prometheus))
    put_secret(kube, "prom-token", {"token": TOKEN + "\n"})

    assert run(kube, readers, memory).published
    status = kube.policy("ns", "p")["status"]
    assigned = sorted(tp for member in status["members"] for tp in member["partitions"])
    assert assigned == [f"t-{p}" for p in range(6)], "every partition Kafka counts is assigned"
    assert sorted(len(member["partitions"]) for member in status["members"]) == [2, 2, 2]
    assert kube.names("Pod") == ["p-0", "p-1", "p-2"], "the replicas start"
    found = conditions(kube)
    assert found["Ready"][:2] == ("True", "Reconciled")
    degraded, reason, message = found["Degraded"]
    assert (degraded, reason) == ("True", "NoLagSeries")
    assert "topic t of group g" in message and "partition counts" in message
    assert Exporter.authorizations == [f"Bearer {TOKEN}"]
    ((settings, topics),) = readers.asked
    assert (settings.bootstrap_servers, dict(settings.client_config), topics) == (
        "k1:9092",
        {"client.rack": "r1"},
        ["t"],
    )

    Exporter.series = [("t", p, 100 * (p + 1)) for p in range(6)]
    run(kube, readers, memory)
    assert conditions(kube)["Degraded"][:2] == ("False", "AsExpected"), "series appeared: lag-based again"
    assert kube.policy("ns", "p")["status"]["totalLag"] == 2100


def test_a_missing_secret_stops_the_policy_naming_the_field_and_the_secret(prometheus: str) -> None:
    kube = FakeKube()
    kube.put_policy("ns", "p", policy_spec(prometheus, secret="not-there"))
    with pytest.raises(ReconcileFailure) as caught:
        run(kube, CountingReaders({"t": 6}), PolicyMemory())
    assert caught.value.reason == "LagSourceInvalid" and not caught.value.transient
    stalled = conditions(kube)["Stalled"]
    assert stalled[:2] == ("True", "LagSourceInvalid")
    assert stalled[2].startswith(
        "lagSource.prometheus.auth.bearerToken.secretName: "
        "Secret 'not-there' not found in the policy's namespace"
    )
    assert Exporter.authorizations == [], "nothing is asked without the credential"
