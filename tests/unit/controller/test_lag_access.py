"""What a lag source may reach beyond its spec (controller/lagaccess.py): Secrets of the policy's
namespace by name, decoded, with the operator's refusals as lag errors that name the chart value;
partition counts through the shared reader of the policy's Kafka connection, its metadata reused."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, cast

import pytest

from groupops.controller.cache import Reader
from groupops.controller.lagaccess import PolicySecrets, SharedPartitionCounts
from groupops.controller.lagfleet import ConnectionKey, KafkaClusterReaders
from groupops.controller.metrics import Metrics
from groupops.kubeapi import Forbidden, KubeError
from groupops.lag import LagSourceConfigError, LagSourceUnavailable, UnknownTopicError
from groupops.lag.kafka_admin import KafkaAdmin
from groupops.lag.registry import SourceContext


class Secrets:
    """A `Reader` holding Secrets, or failing every read with `error`."""

    def __init__(
        self, secrets: dict[tuple[str, str], dict[str, str]], error: Exception | None = None
    ) -> None:
        self.secrets = secrets
        self.error = error
        self.asked: list[tuple[str | None, str]] = []

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        assert (api_version, kind) == ("v1", "Secret")
        self.asked.append((namespace, name))
        if self.error is not None:
            raise self.error
        data = self.secrets.get((namespace or "", name))
        return None if data is None else {"metadata": {"name": name}, "data": data}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secrets_of(reader: Secrets, namespace: str = "team-a") -> PolicySecrets:
    return PolicySecrets(cast(Reader, reader), namespace)


def test_a_secret_is_read_by_name_in_the_policys_namespace_only() -> None:
    reader = Secrets({("team-a", "prom"): {"token": b64("t0ken")}, ("team-b", "other"): {"token": b64("x")}})
    secrets = secrets_of(reader)
    assert secrets("prom") == {"token": b"t0ken"}
    assert secrets("other") is None, "a Secret of another namespace is not there"
    assert reader.asked == [("team-a", "prom"), ("team-a", "other")]
    assert "t0ken" not in repr(secrets)


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        pytest.param(
            Forbidden("secrets 'prom' is forbidden", status=403),
            LagSourceConfigError,
            "the operator may not read Secret 'prom': list it in the chart's kafkaAuthSecrets",
            id="forbidden",
        ),
        pytest.param(
            KubeError("connection refused", status=0),
            LagSourceUnavailable,
            "cannot read Secret 'prom'",
            id="api-down",
        ),
    ],
)
def test_the_operators_refusals_are_lag_errors(error: Exception, kind: type[Exception], words: str) -> None:
    with pytest.raises(kind, match=words):
        secrets_of(Secrets({}, error))("prom")


def test_a_value_that_is_not_base64_is_refused_without_repeating_it() -> None:
    with pytest.raises(LagSourceConfigError) as caught:
        secrets_of(Secrets({("team-a", "odd"): {"token": "not*base64!"}}))("odd")
    assert "not*base64!" not in str(caught.value)


# -- partition counts through the shared readers ---------------------------------------------------


class MetadataAdmin:
    """Stands in for `KafkaAdmin` where partition counts need it: topic descriptions."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions
        self.topic_calls: list[list[str]] = []
        self.login_refused = False

    def describe_topics(self, topics: list[str], _timeout_s: float) -> dict[str, Future[Any]]:
        self.topic_calls.append(sorted(topics))
        answers: dict[str, Future[Any]] = {}
        for topic in topics:
            future: Future[Any] = Future()
            count = self.partitions.get(topic)
            if count is None:
                future.set_exception(LookupError(topic))
            else:
                partitions = [SimpleNamespace(id=i, replicas=[]) for i in range(count)]
                future.set_result(SimpleNamespace(partitions=partitions))
            answers[topic] = future
        return answers

    def describe_groups(self, _groups: list[str], _timeout_s: float) -> dict[str, Future[Any]]:
        raise AssertionError("counts ask no group")

    def list_offsets(self, _queries: list[Any], _timeout_s: float) -> dict[Any, Future[Any]]:
        raise AssertionError("counts ask no offsets")

    def result(self, future: Future[Any], _deadline: Any, what: str) -> Any:
        try:
            return future.result(timeout=5)
        except LookupError:
            raise UnknownTopicError(f"{what} does not exist") from None

    def close(self) -> None:
        pass


@pytest.fixture
def made() -> list[tuple[ConnectionKey, MetadataAdmin]]:
    return []


@pytest.fixture
def readers(made: list[tuple[ConnectionKey, MetadataAdmin]]) -> Iterator[KafkaClusterReaders]:
    def connect(key: ConnectionKey, _on_request: Callable[[str], None]) -> KafkaAdmin:
        admin = MetadataAdmin({"orders": 12, "audit": 3})
        made.append((key, admin))
        return cast(KafkaAdmin, admin)

    fleet = KafkaClusterReaders(Metrics(), window_s=0.0, connect=connect)
    yield fleet
    fleet.close()


CONTEXT = SourceContext(bootstrap_servers="k2:9092,k1:9092", client_config={"sasl.username": "alice"})


def test_partition_counts_come_through_the_reader_of_the_policys_connection(
    readers: KafkaClusterReaders, made: list[tuple[ConnectionKey, MetadataAdmin]]
) -> None:
    counts = SharedPartitionCounts(readers, CONTEXT)
    assert counts(["orders", "audit", "gone"]) == {"orders": 12, "audit": 3}
    assert counts(["orders"]) == {"orders": 12}
    ((key, admin),) = made
    assert key.bootstrap_servers == "k1:9092,k2:9092"
    assert dict(key.properties) == {"sasl.username": "alice"}
    assert admin.topic_calls == [["audit", "gone", "orders"]], "descriptions are reused for a few seconds"
    with pytest.raises(UnknownTopicError):
        counts(["gone"])
