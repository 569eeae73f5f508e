"""A group with committed offsets, lag and no consumer running is STOP, on the real broker and API
server with the operator (lagSource kafka): status lists every partition with lag as STOP, one
`GroupStopped` Event says so, the time lag is at least the window's age (the log end stands
still: no rate), the goal is not met, and the group is reported, not replanned. No kubelet runs
here: the policy's pods are created and never start, so nobody takes a Lease."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.operator_support import Kubectl, OperatorProcess, cgp, create_namespace
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

PRODUCED = [20, 20, 20]
COMMITTED = [5, 20, 12]
"""Partition 1 is caught up (OK); 0 and 2 have lag and nobody to consume it (STOP)."""


@pytest.fixture
def namespace(kubectl: Kubectl, unique_name: Any) -> str:
    name: str = unique_name("stuck")
    create_namespace(kubectl, name)
    return name


@pytest.fixture
def group_topic(kafka_bootstrap: str, unique_name: Any) -> tuple[str, str]:
    """A topic with PRODUCED messages per partition, and a group that committed COMMITTED."""
    topic, group = unique_name("orders"), unique_name("stopped-group")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=len(PRODUCED), replication_factor=1)])[topic].result(
        30
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, count in enumerate(PRODUCED):
        for i in range(count):
            producer.produce(topic, value=f"m{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    committer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        offsets = [KafkaPartition(topic, p, offset) for p, offset in enumerate(COMMITTED)]
        committer.commit(offsets=offsets, asynchronous=False)
    finally:
        committer.close()
    return group, topic


def stop_events(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    events = kubectl.get_json("events", None, namespace) or {"items": []}
    return [e for e in events["items"] if e["reason"] in ("GroupStopped", "PartitionStalled")]


def test_a_group_with_lag_and_no_consumer_is_reported_stopped_not_replanned(
    kubectl: Kubectl,
    namespace: str,
    operator: OperatorProcess,
    kafka_bootstrap: str,
    group_topic: tuple[str, str],
) -> None:
    group, topic = group_topic
    policy = {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": "stopped"},
        "spec": {
            "kafka": {"bootstrapServers": kafka_bootstrap},
            "groupId": group,
            "topics": [topic],
            "strategy": {"type": "lag", "autoOffsetReset": "earliest"},
            "lagSource": {"type": "kafka"},
            "consumers": {"replicas": 2, "maxPollIntervalSeconds": 5},
            "targetTimeLagSeconds": 1,
        },
    }
    kubectl.apply(policy, namespace)

    def stopped() -> dict[str, Any] | None:
        status = cgp(kubectl, namespace, "stopped").get("status") or {}
        return status if len(status.get("stuckPartitions") or []) == 2 else None

    status = wait_for("two partitions reported STOP", stopped, timeout=45, interval=0.5)
    assert [(e["topic"], e["partition"], e["state"]) for e in status["stuckPartitions"]] == [
        (topic, 0, "STOP"),
        (topic, 2, "STOP"),
    ]
    assert status["timeLagSeconds"] >= 5, "at least the window's age: the log end stands still"
    assert status["timeLagGoal"] == {"targetSeconds": 1, "met": False}
    epoch = status["epoch"]

    time.sleep(4)  # a few more reads, each at a 1 s tick
    status = cgp(kubectl, namespace, "stopped")["status"]
    assert status["epoch"] == epoch, "a stopped group is reported, not replanned"
    assert [e["state"] for e in status["stuckPartitions"]] == ["STOP", "STOP"]
    (event,) = stop_events(kubectl, namespace)
    assert event["reason"] == "GroupStopped" and event["type"] == "Warning"
    assert f"{topic}-0" in event["message"] and f"{topic}-2" in event["message"]
    assert operator.alive()
