"""A policy's `zones` reach Kafka as each pod's `client.rack`, on the three-broker cluster in racks
r1, r2, r3. With `delivery: native` the group's leader runs Kafka's rack-aware assignor (KIP-881)
over its members' racks: each replica gets exactly the partitions whose only replica is in its
zone. That answer is possible only if every member told the leader its rack (without racks the
same assignor answers differently on this topic), and it is the only balanced rack-local answer,
so the operator's prediction (its engine, given the pods' zones and the partitions' replica racks
from its `kafka` lag read) must equal it: PlanApplied=True, BrokerMatches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from groupops.assign import get_strategy
from groupops.model import GroupInput, Member, MemberId, TopicPartition
from tests.e2e.consumer_e2e import policy_stack
from tests.e2e.test_handoff_native import Assignment, broker_matches, stable_assignment
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

ZONES = ("r1", "r2", "r3")
"""The rack cluster's broker.rack values (node ids 1, 2, 3); replica i runs in ZONES[i]."""
LAYOUT = (2, 3, 1, 1, 3, 2)
"""The broker of each partition's only replica. Neither range's contiguous split ([0, 1], [2, 3],
[4, 5]) nor a round robin ([0, 3], [1, 4], [2, 5]) is rack-local on it, so only an assignor that
knows the members' racks gives replica 0 (r1) [2, 3], replica 1 (r2) [0, 5], replica 2 (r3) [1, 4]."""


def rack_local(topic: str) -> dict[str, set[TopicPartition]]:
    return {
        zone: {TopicPartition(topic, p) for p, node in enumerate(LAYOUT) if ZONES[node - 1] == zone}
        for zone in ZONES
    }


def without_racks(strategy: str, topic: str, identities: list[str]) -> Assignment:
    """What the same assignor gives these members when none of them says its rack."""
    group = GroupInput(
        topics={topic: len(LAYOUT)},
        members=tuple(
            Member(member_id=MemberId(i), group_instance_id=i, topics=frozenset({topic})) for i in identities
        ),
    )
    return {str(m): tuple(sorted(tps)) for m, tps in get_strategy(strategy)(group).items()}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_each_replica_tells_kafka_its_zone_and_gets_the_partitions_of_its_rack(
    kube_config: str,
    kafka_rack_cluster: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    strategy: str,
) -> None:
    with policy_stack(
        kube_config=kube_config,
        kafka_bootstrap=kafka_rack_cluster,
        unique_name=unique_name,
        tmp_path=tmp_path,
        partitions=1,
    ) as s:
        admin = AdminClient({"bootstrap.servers": kafka_rack_cluster})
        topic = unique_name("placed")
        placed = NewTopic(topic, num_partitions=len(LAYOUT), replica_assignment=[[node] for node in LAYOUT])
        admin.create_topics([placed])[topic].result(timeout=60)
        s.apply(
            topics=[topic],
            strategy={"type": strategy, "rackAware": True, "autoOffsetReset": "earliest"},
            consumers={"replicas": 3, "delivery": "native", "zones": list(ZONES)},
        )
        identities = [s.identity(i) for i in range(3)]

        broker = wait_for(
            "a stable group of 3 static members",
            lambda: stable_assignment(admin, s.group_id, identities, len(LAYOUT)),
            300,
            interval=1.0,
            explain=s.diagnostics,
        )
        local = rack_local(topic)
        print(f"\n{strategy}: broker {broker}")
        for identity, zone in zip(identities, ZONES, strict=True):
            assert set(broker[identity]) == local[zone], f"{identity} in {zone} got {broker[identity]}"
        assert broker != without_racks(strategy, topic, identities), "the racks made the difference"

        status = wait_for(
            "the operator reporting that Kafka matches its rack-aware prediction",
            lambda: broker_matches(s),
            120,
            explain=s.diagnostics,
        )
        assert status["brokerAssignment"] == {"groupState": "Stable", "differing": [], "matches": True}
        assert [m.get("zone") for m in sorted(status["members"], key=lambda m: m["instanceId"])] == list(
            ZONES
        )
