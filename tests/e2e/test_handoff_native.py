"""`delivery: native` on the whole stack: the operator runs one pod per identity, each replica
joins the group as a static member (group.instance.id = its identity) with Kafka's own assignor,
and the broker's actual assignment (DescribeGroups) equals the operator's prediction (the plan
it publishes in one epoch, computed by the same engine) for range and roundrobin; the operator
itself compares them and reports it (PlanApplied=True, reason BrokerMatches)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from groupops.model import TopicPartition
from tests.e2e.consumer_e2e import StackFactory
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 7  # not a multiple of the replica count: range and roundrobin differ in the remainder


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_native_replicas_join_as_static_members_and_kafka_assigns_what_the_operator_predicts(
    new_stack: StackFactory, strategy: str
) -> None:
    with new_stack(
        partitions=PARTITIONS,
    ) as s:
        s.apply(
            strategy={"type": strategy, "autoOffsetReset": "earliest"},
            lagSource={"type": "static", "static": {"lags": {s.topic: [1] * PARTITIONS}}},
            consumers={"replicas": 3, "delivery": "native"},
        )
        identities = [s.identity(i) for i in range(3)]
        admin = AdminClient({"bootstrap.servers": s.bootstrap})

        def actual() -> dict[str, list[TopicPartition]] | None:
            description = admin.describe_consumer_groups([s.group_id])[s.group_id].result(timeout=30)
            members: list[Any] = list(description.members)
            assignment = {
                str(m.group_instance_id): sorted(
                    TopicPartition(tp.topic, tp.partition) for tp in m.assignment.topic_partitions
                )
                for m in members
            }
            stable = str(description.state).endswith("STABLE")
            if (
                stable
                and sorted(assignment) == identities
                and sum(map(len, assignment.values())) == PARTITIONS
            ):
                return assignment
            return None

        def predicted() -> dict[str, list[TopicPartition]] | None:
            sets = {identity: sorted(tps) for identity, tps in s.sets().items()}
            return sets if sorted(sets) == identities and sum(map(len, sets.values())) == PARTITIONS else None

        broker = wait_for("a stable group of 3 static members", actual, 300, interval=1.0)
        operator = wait_for("the operator's plan for the 3 identities", predicted, 120, interval=0.5)
        print(f"\n{strategy}: broker {broker}\n{strategy}: operator {operator}")
        assert broker == operator

        def reported() -> dict[str, Any] | None:
            status = s.status()
            applied = next((c for c in status.get("conditions", []) if c["type"] == "PlanApplied"), {})
            return status if applied.get("reason") == "BrokerMatches" else None

        status = wait_for("the operator reporting that Kafka matches", reported, 60, explain=s.diagnostics)
        assert status["brokerAssignment"] == {"groupState": "Stable", "differing": [], "matches": True}
        assert status["epoch"] == s.plan().epoch  # type: ignore[union-attr]
