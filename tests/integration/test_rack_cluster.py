"""The three-broker mode: nodes in racks r1, r2, r3, visible in cluster metadata, and the racks
of each partition's replicas reach the lag source (the engine's `partition_racks`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource

pytestmark = pytest.mark.integration


def test_three_brokers_report_their_racks_in_cluster_metadata(kafka_rack_cluster: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_rack_cluster})
    description = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert {node.id: node.rack for node in description.nodes} == {1: "r1", 2: "r2", 3: "r3"}
    assert len(kafka_rack_cluster.split(",")) == 3


def test_replica_racks_of_every_partition_reach_the_lag_source(
    kafka_rack_cluster: str, unique_name: Callable[[str], str]
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_rack_cluster})
    spread, single = unique_name("spread"), unique_name("single")
    futures = admin.create_topics([NewTopic(spread, 3, 3), NewTopic(single, 3, 1)])
    for future in futures.values():
        future.result(timeout=30)

    with KafkaLagSource(KafkaLagSettings(bootstrap_servers=kafka_rack_cluster)) as source:
        offsets = source.read_group(unique_name("group"), [spread, single])

    every_rack = frozenset({"r1", "r2", "r3"})
    assert offsets.partition_racks[spread] == [every_rack] * 3
    # One replica each: Kafka's rack-aware replica placement puts the three on three racks.
    single_racks = offsets.partition_racks[single]
    assert all(len(racks) == 1 for racks in single_racks)
    assert frozenset().union(*single_racks) == every_rack
    # ... and the lag snapshot the planner gets carries them (rack-aware plans use them).
    assert offsets.snapshot("earliest").partition_racks == offsets.partition_racks
