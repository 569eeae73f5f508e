"""The operator reads lag from the real Kafka broker (lagSource kafka): the plan and status follow
the messages actually waiting, every read lands in the offset history topic (--history-topic),
and a topic the cluster does not have is reported, not crashed on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupops.lag.history import SnapshotRow, from_json
from tests.e2e.operator_support import (
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    create_namespace,
    groupops_assign,
    operator_fixture,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

WAITING = [10, 0, 5, 0]


@pytest.fixture
def namespace(kubectl: Kubectl, unique_name: Any) -> str:
    name: str = unique_name("kafka-lag")
    create_namespace(kubectl, name)
    return name


@pytest.fixture
def history_topic(unique_name: Any) -> str:
    name: str = unique_name("offsets")
    return name


@pytest.fixture
def operator(
    kube_config: str, namespace: str, tmp_path: Path, history_topic: str
) -> Iterator[OperatorProcess]:
    yield from operator_fixture(kube_config, namespace, tmp_path, extra=["--history-topic", history_topic])


def history_rows(bootstrap: str, topic: str) -> list[SnapshotRow]:
    """Every row appended to the offset history topic so far."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "history-reader", "enable.partition.eof": True}
    )
    try:
        consumer.assign([KafkaPartition(topic, 0, OFFSET_BEGINNING)])
        rows: list[SnapshotRow] = []
        while True:
            message = consumer.poll(10.0)
            if message is None or (message.error() and message.error().code() == KafkaError._PARTITION_EOF):
                return rows
            if message.error() is None:
                rows.append(from_json(message.value()))
    finally:
        consumer.close()


@pytest.fixture
def topic(kafka_bootstrap: str, unique_name: Any) -> str:
    name: str = unique_name("orders")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=len(WAITING), replication_factor=1)])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, count in enumerate(WAITING):
        for i in range(count):
            producer.produce(name, value=f"m{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    return name


def policy(name: str, bootstrap: str, topics: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "groupId": f"{name}-group",
            "topics": topics,
            "strategy": {"type": "lag", "autoOffsetReset": "earliest"},
            "lagSource": {"type": "kafka"},
            "consumers": {"replicas": 2},
        },
    }


def test_plan_follows_the_brokers_lag(
    kubectl: Kubectl,
    namespace: str,
    operator: OperatorProcess,
    kafka_bootstrap: str,
    topic: str,
    history_topic: str,
) -> None:
    kubectl.apply(policy("live", kafka_bootstrap, [topic]), namespace)
    current = wait_for("a plan from the broker's lag", settled(kubectl, namespace, "live"), timeout=90)
    status = current["status"]
    assert status["totalLag"] == sum(WAITING)
    expected = groupops_assign(
        {
            "strategy": "lag",
            "topics": {topic: len(WAITING)},
            "members": [
                {
                    "member_id": f"live-group-{i}",
                    "group_instance_id": f"live-group-{i}",
                    "topics": [topic],
                    "priority": -(i + 1),
                }
                for i in range(2)
            ],
            "lags": {topic: WAITING},
        }
    )["assignment"]
    shown = {m["instanceId"]: m["partitions"] for m in status["members"]}
    assert shown == {identity: [f"{t}-{p}" for t, p in tps] for identity, tps in expected.items()}
    assert {m["instanceId"]: m["lag"] for m in status["members"]} == {
        identity: sum(WAITING[p] for _, p in tps) for identity, tps in expected.items()
    }

    # Every read was appended to the offset history, the pipeline's input, on the cluster read.
    # With delivery plan the replicas are no members of the Kafka group: the rows name the
    # published plan's owners (a read before the first plan names nobody).
    owner = {p: identity for identity, tps in expected.items() for _, p in tps}
    wanted = [(p, count, None, owner[p]) for p, count in enumerate(WAITING)]

    def newest_of(rows: list[SnapshotRow]) -> list[tuple[Any, ...]]:
        newest = max(row["ts"] for row in rows)
        return sorted(
            (row["partition"], row["log_end"], row["committed"], row["member"])
            for row in rows
            if row["ts"] == newest
        )

    rows = wait_for(
        "the offset history naming the plan's owners",
        lambda: (
            (found := history_rows(kafka_bootstrap, history_topic)) and newest_of(found) == wanted and found
        ),
        timeout=60,
        explain=lambda: (
            f"wanted {wanted}; last rows {history_rows(kafka_bootstrap, history_topic)[-len(WAITING) :]}"
        ),
    )
    assert {(row["cluster"], row["group"], row["topic"]) for row in rows} == {
        (kafka_bootstrap, "live-group", topic)
    }
    assert len(rows) % len(WAITING) == 0


def test_a_topic_the_cluster_lacks_is_reported(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess, kafka_bootstrap: str, unique_name: Any
) -> None:
    missing = unique_name("absent")
    kubectl.apply(policy("lost", kafka_bootstrap, [missing]), namespace)

    def reported() -> dict[str, Any] | None:
        current = cgp(kubectl, namespace, "lost")
        return current if condition(current, "Ready").get("reason") == "TopicNotFound" else None

    current = wait_for("TopicNotFound", reported, timeout=90)
    assert missing in condition(current, "Ready")["message"]
    assert kubectl.items("pods", namespace, "groupops.dev/policy=lost") == [], "nothing runs without a plan"
    assert operator.alive()
