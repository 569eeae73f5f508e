"""The `kafka` lag source against Apache Kafka's own broker: known lags read back exactly, the
reset rule for never-committed partitions (also after retention moved the log start), and clear,
bounded errors for an unknown topic, an unknown group, a stopped broker and refused credentials.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from typer.testing import CliRunner

from groupops.assign import get_strategy
from groupops.cli import app
from groupops.devstack import KafkaCluster, KafkaSettings
from groupops.lag import LagAuthorizationError, LagSourceUnavailable, UnknownTopicError
from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource, UnknownGroupError
from groupops.model import GroupInput, Member, MemberId
from groupops.model import TopicPartition as Partition

pytestmark = pytest.mark.integration

# The bound for "clear error, no hang"; the source's own deadline is 6 s.
ERROR_BOUND_S = 10.0


def create_topic(
    bootstrap: str, topic: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, counts: list[int]) -> None:
    """`counts[p]` small records into partition p, all acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failures: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    for partition, count in enumerate(counts):
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, value=b"%d" % i, partition=partition, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            if i % 5000 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []


def consume_and_commit(bootstrap: str, group: str, topic: str, positions: dict[int, int]) -> None:
    """A real consumer of `group` reads partition p up to `positions[p]` and commits there."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in positions])
        remaining = {p: n for p, n in positions.items() if n > 0}
        while remaining:
            for message in consumer.consume(num_messages=1000, timeout=5):
                assert message.error() is None
                p, offset = message.partition(), message.offset()
                if p in remaining and offset is not None and offset + 1 >= positions[p]:
                    del remaining[p]
                    consumer.pause([TopicPartition(topic, p)])
        consumer.commit(
            offsets=[TopicPartition(topic, p, n) for p, n in positions.items()], asynchronous=False
        )
    finally:
        consumer.close()


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    target = TopicPartition(topic, partition, offset)
    assert admin.delete_records([target])[target].result(timeout=30).low_watermark == offset


def source(bootstrap: str, reset: str = "earliest", **kwargs: object) -> KafkaLagSource:
    return KafkaLagSource(KafkaLagSettings(bootstrap_servers=bootstrap, auto_offset_reset=reset, **kwargs))  # type: ignore[arg-type]


@pytest.fixture
def skewed_group(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> tuple[str, str]:
    """A 3-partition topic whose group lags 100,000 / 50,000 / 60,000 (the seed's example)."""
    topic, group = unique_name("orders"), unique_name("orders-processor")
    create_topic(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, [110_000, 60_000, 70_000])
    consume_and_commit(kafka_bootstrap, group, topic, {0: 10_000, 1: 10_000, 2: 10_000})
    return topic, group


def test_known_lags_are_read_back_exactly_and_give_the_seed_assignment(
    kafka_bootstrap: str, skewed_group: tuple[str, str]
) -> None:
    topic, group = skewed_group
    with source(kafka_bootstrap) as lag_source:
        snapshot = lag_source.read(group, [topic])
    assert snapshot.lags == {topic: [100_000, 50_000, 60_000]}
    assert snapshot.offsets is not None
    assert snapshot.offsets[Partition(topic, 0)].committed == 10_000
    assert snapshot.offsets[Partition(topic, 0)].log_end == 110_000

    members = tuple(Member(member_id=MemberId(m), topics=frozenset({topic})) for m in ("C0", "C1"))
    group_input = GroupInput(topics={topic: 3}, members=members, lags=snapshot.lags)
    assert get_strategy("lag")(group_input) == {
        MemberId("C0"): [Partition(topic, 0)],
        MemberId("C1"): [Partition(topic, 1), Partition(topic, 2)],
    }


def test_lag_command_prints_the_live_lag_as_json(kafka_bootstrap: str, skewed_group: tuple[str, str]) -> None:
    topic, group = skewed_group
    result = CliRunner().invoke(
        app, ["lag", "--bootstrap", kafka_bootstrap, "--group", group, "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["lags"] == {topic: [100_000, 50_000, 60_000]}
    assert document["total_lag"] == 210_000
    assert document["group_known"] is True


def test_assign_plans_on_the_live_lag(kafka_bootstrap: str, skewed_group: tuple[str, str]) -> None:
    topic, group = skewed_group
    document = {
        "strategy": "lag",
        "topics": {topic: 3},
        "members": [{"member_id": "C0", "topics": [topic]}, {"member_id": "C1", "topics": [topic]}],
    }
    result = CliRunner().invoke(
        app,
        ["assign", "--lag-from-kafka", "--bootstrap", kafka_bootstrap, "--group", group],
        input=json.dumps(document),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["assignment"] == {"C0": [[topic, 0]], "C1": [[topic, 1], [topic, 2]]}


@pytest.fixture
def half_committed(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> tuple[str, str]:
    """p0: 500 records, committed at 200. p1: 300 records, never committed."""
    topic, group = unique_name("reset"), unique_name("reset-group")
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, [500, 300])
    consume_and_commit(kafka_bootstrap, group, topic, {0: 200})
    return topic, group


@pytest.mark.parametrize(
    ("reset", "delete_p1_before", "expected"),
    [
        pytest.param("latest", None, [300, 0], id="never-committed-reads-0-under-latest"),
        pytest.param("earliest", None, [300, 300], id="never-committed-reads-end-minus-start-under-earliest"),
        pytest.param("earliest", 120, [300, 180], id="earliest-after-retention-moved-the-log-start"),
        pytest.param("latest", 120, [300, 0], id="latest-after-retention-still-0"),
        pytest.param("smallest", None, [300, 300], id="librdkafka-spelling-smallest-is-earliest"),
    ],
)
def test_reset_rule_for_never_committed_partitions(
    kafka_bootstrap: str,
    half_committed: tuple[str, str],
    reset: str,
    delete_p1_before: int | None,
    expected: list[int],
) -> None:
    topic, group = half_committed
    if delete_p1_before is not None:
        delete_before(kafka_bootstrap, topic, 1, delete_p1_before)
    with source(kafka_bootstrap, reset) as lag_source:
        snapshot = lag_source.read(group, [topic])
    assert snapshot.lags == {topic: expected}
    assert snapshot.offsets is not None
    assert snapshot.offsets[Partition(topic, 1)].committed is None
    assert snapshot.offsets[Partition(topic, 1)].log_start == (delete_p1_before or 0)


def test_a_commit_below_the_log_start_still_counts_from_the_commit(
    kafka_bootstrap: str, half_committed: tuple[str, str]
) -> None:
    topic, group = half_committed
    delete_before(kafka_bootstrap, topic, 0, 250)
    with source(kafka_bootstrap) as lag_source:
        snapshot = lag_source.read(group, [topic])
    assert snapshot.lags[topic][0] == 300  # 500 - 200, as kafka-consumer-groups reports it


def test_unknown_topic_is_a_clear_error(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    missing = unique_name("missing")
    began = time.monotonic()
    with source(kafka_bootstrap) as lag_source, pytest.raises(UnknownTopicError, match=missing):
        lag_source.read(unique_name("group"), [missing])
    assert time.monotonic() - began < ERROR_BOUND_S

    result = CliRunner().invoke(
        app, ["lag", "--bootstrap", kafka_bootstrap, "--group", "g", "--topic", missing]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and missing in result.stderr
    assert result.stderr.count("\n") == 1


def test_unknown_group_reads_every_partition_under_the_reset_rule(
    kafka_bootstrap: str, half_committed: tuple[str, str], unique_name: Callable[[str], str]
) -> None:
    topic, _ = half_committed
    stranger = unique_name("nobody")
    with source(kafka_bootstrap, "earliest") as lag_source:
        offsets = lag_source.read_group(stranger, [topic])
        assert offsets.group_known is False
        assert offsets.snapshot("earliest").lags == {topic: [500, 300]}
        assert offsets.snapshot("latest").lags == {topic: [0, 0]}


def test_unknown_group_is_a_clear_error_when_the_group_is_required(
    kafka_bootstrap: str, half_committed: tuple[str, str], unique_name: Callable[[str], str]
) -> None:
    topic, _ = half_committed
    stranger = unique_name("nobody")
    began = time.monotonic()
    with (
        source(kafka_bootstrap, require_group=True) as lag_source,
        pytest.raises(UnknownGroupError, match=stranger),
    ):
        lag_source.read(stranger, [topic])
    assert time.monotonic() - began < ERROR_BOUND_S

    result = CliRunner().invoke(app, ["lag", "--bootstrap", kafka_bootstrap, "--group", stranger])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr and "(--group)" in result.stderr


def test_a_stopped_broker_is_a_clear_error_within_the_bound(
    kafka_cluster_factory: Callable[[KafkaSettings], KafkaCluster], unique_name: Callable[[str], str]
) -> None:
    cluster = kafka_cluster_factory(KafkaSettings())
    topic, group = unique_name("doomed"), unique_name("doomed-group")
    create_topic(cluster.bootstrap, topic, 1)
    produce(cluster.bootstrap, topic, [10])
    with source(cluster.bootstrap) as lag_source:
        assert lag_source.read(group, [topic]).lags == {topic: [10]}
        cluster.stop()
        began = time.monotonic()
        with pytest.raises(LagSourceUnavailable, match=r"no answer from Kafka at 127\.0\.0\.1:\d+ within"):
            lag_source.read(group, [topic])
        assert time.monotonic() - began < ERROR_BOUND_S

    began = time.monotonic()
    result = CliRunner().invoke(
        app, ["lag", "--bootstrap", cluster.bootstrap, "--group", group, "--topic", topic]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no answer from Kafka")
    assert time.monotonic() - began < ERROR_BOUND_S


def test_sasl_credentials_in_librdkafka_names_are_used_and_refusals_are_clear(
    kafka_cluster_factory: Callable[[KafkaSettings], KafkaCluster], unique_name: Callable[[str], str]
) -> None:
    cluster = kafka_cluster_factory(
        KafkaSettings(sasl_users={"admin": "admin-secret", "alice": "alice-secret"})
    )
    assert cluster.sasl_bootstrap is not None

    def sasl(user: str, password: str) -> dict[str, str]:
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }

    topic, group = unique_name("secured"), unique_name("secured-group")
    create_topic(cluster.sasl_bootstrap, topic, 2, sasl("admin", "admin-secret"))
    produce(cluster.bootstrap, topic, [7, 3])

    with source(cluster.sasl_bootstrap, client_config=sasl("admin", "admin-secret")) as admin_source:
        assert admin_source.read(group, [topic]).lags == {topic: [7, 3]}

    began = time.monotonic()
    with (
        source(cluster.sasl_bootstrap, client_config=sasl("alice", "alice-secret")) as alice_source,
        pytest.raises(LagAuthorizationError, match="refused access"),
    ):
        alice_source.read(group, [topic])
    assert time.monotonic() - began < ERROR_BOUND_S

    began = time.monotonic()
    with (
        source(cluster.sasl_bootstrap, client_config=sasl("admin", "wrong")) as intruder_source,
        pytest.raises(LagAuthorizationError),
    ):
        intruder_source.read(group, [topic])
    assert time.monotonic() - began < ERROR_BOUND_S
