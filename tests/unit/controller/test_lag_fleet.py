"""The operator's Kafka lag readers, without a broker: one client per connection and never one
shared across different credentials, consumer-only properties left out of the key (librdkafka
ignores them on an admin client) but still checked, idle and refused clients closed, topic
metadata reused for a few seconds, and every client counted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, cast

import pytest
from confluent_kafka.admin import AdminClient

from groupops.controller.lagfleet import (
    CONSUMER_ONLY_PROPERTIES,
    ClusterLagReader,
    ConnectionKey,
    KafkaClusterReaders,
    connection_key,
)
from groupops.controller.metrics import Metrics
from groupops.lag import LagAuthorizationError, LagSourceConfigError, LagSourceUnavailable
from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource
from groupops.lag.kafka_admin import KafkaAdmin

IDLE_S = 300.0


def sasl(user: str, password: str, **more: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        **more,
    }


def settings(bootstrap: str = "k1:9092,k2:9092", **client_config: str) -> KafkaLagSettings:
    return KafkaLagSettings(bootstrap_servers=bootstrap, client_config=client_config)


class FakeAdmin:
    """Stands in for `KafkaAdmin`: remembers its key, whether it was closed, and answers topic
    descriptions from a counter."""

    def __init__(self, key: ConnectionKey) -> None:
        self.key = key
        self.closed = False
        self.login_refused = False
        self.topic_calls: list[list[str]] = []

    def close(self) -> None:
        self.closed = True

    def describe_topics(self, topics: list[str], _timeout_s: float) -> dict[str, Future[Any]]:
        self.topic_calls.append(list(topics))
        answers: dict[str, Future[Any]] = {}
        for topic in topics:
            future: Future[Any] = Future()
            if topic.startswith("missing"):
                future.set_exception(LookupError(topic))
            else:
                future.set_result(f"description {len(self.topic_calls)} of {topic}")
            answers[topic] = future
        return answers

    def describe_groups(self, _groups: list[str], _timeout_s: float) -> dict[str, Future[Any]]:
        raise AssertionError("not asked in these tests")

    def list_offsets(self, _queries: list[Any], _timeout_s: float) -> dict[Any, Future[Any]]:
        raise AssertionError("not asked in these tests")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def made() -> list[FakeAdmin]:
    return []


@pytest.fixture
def readers(clock: Clock, made: list[FakeAdmin]) -> Iterator[KafkaClusterReaders]:
    def connect(key: ConnectionKey, _on_request: Callable[[str], None]) -> KafkaAdmin:
        admin = FakeAdmin(key)
        made.append(admin)
        return cast(KafkaAdmin, admin)

    fleet = KafkaClusterReaders(Metrics(), idle_s=IDLE_S, connect=connect, clock=clock)
    yield fleet
    fleet.close()


def borrow(readers: KafkaClusterReaders, lag_settings: KafkaLagSettings) -> ClusterLagReader:
    with readers.reader(lag_settings) as reader:
        return reader


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(settings(), settings(), id="same-settings"),
        pytest.param(
            settings("k1:9092,k2:9092"), settings(" k2:9092 ,k1:9092"), id="brokers-in-another-order"
        ),
        pytest.param(
            settings(**sasl("alice", "pw")),
            settings(**sasl("alice", "pw"), **{"max.poll.interval.ms": "600000", "group.id": "other"}),
            id="differing-only-in-consumer-properties",
        ),
    ],
)
def test_policies_on_one_connection_share_one_client(
    readers: KafkaClusterReaders, made: list[FakeAdmin], first: KafkaLagSettings, second: KafkaLagSettings
) -> None:
    assert borrow(readers, first) is borrow(readers, second)
    assert len(made) == 1
    assert readers.connections == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(settings("k1:9092"), settings("k1:9092,k2:9092"), id="other-brokers"),
        pytest.param(settings(**sasl("alice", "pw")), settings(**sasl("bob", "pw")), id="other-user"),
        pytest.param(settings(**sasl("alice", "pw")), settings(**sasl("alice", "pw2")), id="other-password"),
        pytest.param(
            settings(**sasl("alice", "pw")),
            settings(**{"security.protocol": "PLAINTEXT"}),
            id="sasl-vs-plaintext",
        ),
        pytest.param(
            settings(**{"ssl.ca.location": "/etc/a.pem"}),
            settings(**{"ssl.ca.location": "/etc/b.pem"}),
            id="other-tls-trust",
        ),
        pytest.param(
            settings(**{"client.rack": "r1"}), settings(), id="a-property-not-known-to-be-consumer-only"
        ),
    ],
)
def test_policies_whose_connections_differ_never_share_a_client(
    readers: KafkaClusterReaders, made: list[FakeAdmin], first: KafkaLagSettings, second: KafkaLagSettings
) -> None:
    assert borrow(readers, first) is not borrow(readers, second)
    assert len(made) == 2
    assert made[0].key != made[1].key


def test_the_client_is_built_from_its_key_alone_and_the_key_never_shows_a_secret() -> None:
    key, left_out = connection_key(
        settings("k2:9092,k1:9092", **sasl("alice", "s3cret"), **{"session.timeout.ms": "45000"})
    )
    assert key.bootstrap_servers == "k1:9092,k2:9092"
    assert dict(key.properties) == sasl("alice", "s3cret")
    assert left_out == {("session.timeout.ms", "45000")}
    assert "s3cret" not in repr(key) and "alice" not in repr(key)


# A valid value of each property that CONSUMER_ONLY_PROPERTIES leaves out of the key.
CONSUMER_PROPERTY_EXAMPLES = {
    "auto.commit.interval.ms": "5000",
    "auto.offset.reset": "earliest",
    "check.crcs": "false",
    "coordinator.query.interval.ms": "600000",
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "true",
    "enable.partition.eof": "false",
    "fetch.error.backoff.ms": "500",
    "fetch.max.bytes": "52428800",
    "fetch.message.max.bytes": "1048576",
    "fetch.min.bytes": "1",
    "fetch.wait.max.ms": "500",
    "group.id": "orders",
    "group.instance.id": "orders-0",
    "group.protocol": "classic",
    "heartbeat.interval.ms": "3000",
    "isolation.level": "read_committed",
    "max.partition.fetch.bytes": "1048576",
    "max.poll.interval.ms": "300000",
    "partition.assignment.strategy": "range",
    "queued.max.messages.kbytes": "65536",
    "queued.min.messages": "100000",
    "session.timeout.ms": "45000",
}


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_every_property_left_out_of_the_key_is_one_librdkafka_ignores_on_an_admin_client() -> None:
    assert set(CONSUMER_PROPERTY_EXAMPLES) == CONSUMER_ONLY_PROPERTIES
    logger = logging.getLogger("test.lagfleet.confwarn")
    logger.propagate = False
    collected = Collected()
    logger.addHandler(collected)
    try:
        for name, value in CONSUMER_PROPERTY_EXAMPLES.items():
            collected.messages.clear()
            admin = AdminClient({name: value, "logger": logger})
            admin.poll(0.5)
            spelled = "fetch.message.max.bytes" if name == "max.partition.fetch.bytes" else name  # an alias
            warning = f"Configuration property {spelled} is a consumer property and will be ignored"
            assert any(warning in message for message in collected.messages), (name, collected.messages)
    finally:
        logger.removeHandler(collected)


def test_a_bad_value_of_a_consumer_property_is_the_same_config_error_as_with_a_client_per_read(
    readers: KafkaClusterReaders, made: list[FakeAdmin]
) -> None:
    bad = settings(**{"max.poll.interval.ms": "soon"})
    with pytest.raises(LagSourceConfigError) as per_read:
        KafkaLagSource(bad)
    with pytest.raises(LagSourceConfigError) as shared:
        borrow(readers, bad)
    assert str(shared.value) == str(per_read.value)
    assert made == [], "no client is made for a policy whose settings are invalid"


def test_a_reader_unused_for_the_idle_time_is_closed_and_one_in_use_never_is(
    readers: KafkaClusterReaders, made: list[FakeAdmin], clock: Clock
) -> None:
    borrow(readers, settings("idle:9092"))
    with readers.reader(settings("busy:9092")):
        clock.now += IDLE_S - 1
        assert readers.close_idle() == 0
        clock.now += 1
        assert readers.close_idle() == 1, "only the idle one: the busy one is being read through"
        assert [admin.closed for admin in made] == [True, False]
    assert readers.close_idle() == 0, "just released: its idle time starts now"
    clock.now += IDLE_S
    assert readers.close_idle() == 1
    assert made[1].closed

    borrow(readers, settings("idle:9092"))
    assert len(made) == 3, "a connection used again after its idle close gets a new client"


def test_a_client_whose_login_was_refused_is_dropped_so_the_next_read_starts_afresh(
    readers: KafkaClusterReaders, made: list[FakeAdmin]
) -> None:
    intruder = settings(**sasl("alice", "wrong"))
    with pytest.raises(LagAuthorizationError), readers.reader(intruder):
        made[0].login_refused = True
        raise LagAuthorizationError("Kafka at k1:9092 refused the login")
    assert made[0].closed
    assert readers.connections == 0
    assert borrow(readers, intruder).admin is cast(KafkaAdmin, made[1])


def test_an_acl_refusal_keeps_the_client(readers: KafkaClusterReaders, made: list[FakeAdmin]) -> None:
    with pytest.raises(LagAuthorizationError), readers.reader(settings()):
        raise LagAuthorizationError("Kafka refused access to topic 'orders'")
    assert not made[0].closed
    assert readers.connections == 1


def test_closing_the_readers_closes_every_client_and_refuses_later_reads(
    readers: KafkaClusterReaders, made: list[FakeAdmin]
) -> None:
    borrow(readers, settings("a:9092"))
    borrow(readers, settings("b:9092"))
    readers.close()
    assert [admin.closed for admin in made] == [True, True]
    with pytest.raises(LagSourceUnavailable, match="closed"):
        borrow(readers, settings("a:9092"))


def test_each_client_is_counted_once_per_cluster(clock: Clock) -> None:
    metrics = Metrics()
    fleet = KafkaClusterReaders(
        metrics, connect=lambda key, _count: cast(KafkaAdmin, FakeAdmin(key)), clock=clock
    )
    try:
        for _ in range(3):
            borrow(fleet, settings("k1:9092"))
        borrow(fleet, settings("k1:9092", **sasl("bob", "pw")))
    finally:
        fleet.close()
    created = metrics.registry.get_sample_value(
        "groupops_operator_kafka_admin_clients_total", {"cluster": "k1:9092"}
    )
    assert created == 2, "one client per connection: bob's credentials make the second"


def test_topic_descriptions_are_reused_for_the_ttl_and_failures_are_not(clock: Clock) -> None:
    admin = FakeAdmin(ConnectionKey("k1:9092", ()))
    reader = ClusterLagReader(cast(KafkaAdmin, admin), window_s=0.0, metadata_ttl_s=5.0, clock=clock)

    def described(*topics: str) -> dict[str, Any]:
        futures = reader.describe_topics(list(topics), 5.0)
        return {topic: futures[topic].exception() or futures[topic].result() for topic in topics}

    assert described("orders") == {"orders": "description 1 of orders"}
    clock.now += 4.9
    first_missing = described("orders", "missing-x")
    assert first_missing["orders"] == "description 1 of orders"
    assert isinstance(first_missing["missing-x"], LookupError)
    assert admin.topic_calls == [["orders"], ["missing-x"]], "only what the cache lacks is asked"
    described("missing-x")
    assert admin.topic_calls[-1] == ["missing-x"], "a failure is asked again, never cached"
    clock.now += 0.2
    assert described("orders") == {"orders": "description 4 of orders"}, "stale after 5 s"
