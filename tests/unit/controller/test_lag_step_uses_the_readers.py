"""The reconcile's lag step reads a `kafka` policy through the operator's per-connection readers,
with the policy's own connection, reset rule and budget; other sources never touch them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from groupops.lag import LagSnapshot
from groupops.lag.registry import SourceContext
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.reconcile_support import reconcile_with_readers

STATIC_SPEC: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "g",
    "topics": ["t"],
    "strategy": {"type": "lag"},
    "lagSource": {"type": "static", "static": {"lags": {"t": [50, 40, 30, 20, 10, 10]}}},
    "consumers": {"replicas": 3},
}
KAFKA_SPEC: dict[str, Any] = {
    **STATIC_SPEC,
    "kafka": {"bootstrapServers": "k1:9092,k2:9092", "properties": {"client.rack": "r1"}},
    "lagSource": {"type": "kafka", "kafka": {"timeoutSeconds": 4}},
}


class FakeReaders:
    """Stands in for `KafkaClusterReaders`: remembers what each policy asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[Mapping[str, Any], SourceContext]] = []
        self.reads: list[tuple[str, list[str]]] = []

    def source(self, spec: Mapping[str, Any], context: SourceContext) -> FakeReaders:
        self.asked.append((spec, context))
        return self

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        self.reads.append((group_id, list(topics)))
        return LagSnapshot(group_id=group_id, taken_at=0.0, lags={"t": [50, 40, 30, 20, 10, 10]})

    def close(self) -> None:
        pass


def run(kube: FakeKube, readers: FakeReaders) -> Any:
    return reconcile_with_readers(kube, readers)


def test_a_kafka_policy_reads_through_the_readers_with_its_own_connection() -> None:
    kube, readers = FakeKube(), FakeReaders()
    kube.put_policy("ns", "p", KAFKA_SPEC)
    assert run(kube, readers).published
    ((spec, context),) = readers.asked
    assert spec == {"timeoutSeconds": 4}
    assert context.bootstrap_servers == "k1:9092,k2:9092"
    assert dict(context.client_config) == {"client.rack": "r1"}
    assert readers.reads == [("g", ["t"])]


def test_a_policy_with_another_source_never_touches_the_readers() -> None:
    kube, readers = FakeKube(), FakeReaders()
    kube.put_policy("ns", "p", STATIC_SPEC)
    assert run(kube, readers).published
    assert readers.asked == [] and readers.reads == []
