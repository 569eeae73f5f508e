"""Topics change under a running policy, as Kafka lets them (issue 10): a topic of the policy is
deleted while it runs, and created again with the same name. The policy keeps serving its other
topic, says which topic is missing (Degraded, TopicsMissing), releases the deleted topic's
partitions, and picks the recreated topic up again, consuming it from its first message under
the default `latest` (design §9.1). No replica crash-loops; nothing produced is lost."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from groupops.model import TopicPartition
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.operator_support import condition
from tests.e2e.runtime_support import ProducedLog, create_topic
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_offsets import produce

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

PARTITIONS = 3
REPLICAS = 2


def planned_topics(s: PolicyStack) -> set[str]:
    plan = s.plan()
    if plan is None or plan.releasing:
        return set()
    return {tp.topic for partitions in plan.plan.assignment.values() for tp in partitions}


def settled(s: PolicyStack, identities: list[str]) -> bool:
    """Nothing being released, and every replica acknowledging the current plan."""
    plan = s.plan()
    return plan is not None and not plan.releasing and all(s.acked(i) == plan.epoch for i in identities)


def degraded(s: PolicyStack) -> dict[str, Any]:
    return condition({"status": s.status()}, "Degraded")


def test_a_deleted_topic_is_dropped_from_the_plan_and_picked_up_again_when_recreated(
    new_stack: StackFactory, unique_name: Any
) -> None:
    with new_stack(partitions=PARTITIONS) as s:
        refunds = unique_name("refunds")
        create_topic(s.bootstrap, refunds, PARTITIONS)
        s.apply(
            topics=[s.topic, refunds],
            strategy={"type": "range"},  # the default autoOffsetReset: latest
            consumers={"replicas": REPLICAS},
        )
        identities = [s.identity(i) for i in range(REPLICAS)]
        wait_for(
            "both replicas acknowledging a plan of both topics",
            lambda: settled(s, identities),
            180,
            explain=s.diagnostics,
        )
        assert planned_topics(s) == {s.topic, refunds}
        produced = ProducedLog()
        produced.acked += produce(s.bootstrap, s.topic, range(PARTITIONS), 20, "orders").acked
        produced.acked += produce(s.bootstrap, refunds, range(PARTITIONS), 20, "refunds").acked
        s.wait_processed(produced.acked, timeout=120)

        admin = AdminClient({"bootstrap.servers": s.bootstrap})
        admin.delete_topics([refunds])[refunds].result(timeout=60)
        wait_for(
            "a plan of the remaining topic only",
            lambda: planned_topics(s) == {s.topic} and settled(s, identities),
            120,
            explain=s.diagnostics,
        )
        state = degraded(s)
        assert state.get("status") == "True" and state.get("reason") == "TopicsMissing", state
        assert refunds in state["message"], state
        # The policy goes on serving the topic that remains.
        produced.acked += produce(s.bootstrap, s.topic, range(PARTITIONS), 20, "orders-after").acked
        s.wait_processed(produced.acked, timeout=120)

        create_topic(s.bootstrap, refunds, PARTITIONS)
        # Written before any replica owns the new topic: `latest` must not skip it.
        recreated = produce(s.bootstrap, refunds, range(PARTITIONS), 20, "refunds-again")
        wait_for(
            "a plan of both topics again",
            lambda: planned_topics(s) == {s.topic, refunds} and settled(s, identities),
            120,
            explain=s.diagnostics,
        )
        wait_for(
            "Degraded cleared",
            lambda: degraded(s).get("status") == "False",
            60,
        )
        report = s.wait_processed(produced.acked + recreated.acked, timeout=120)
        print(f"\n{report.summary()}; faults {s.kubelet.faults}")
        assert report.overlaps == []
        restarts = [run for run in s.kubelet.history if run.identity in identities]
        assert len(restarts) == REPLICAS, f"no replica restarted: {[r.name for r in restarts]}"
        owned = {tp for tps in s.sets().values() for tp in tps}
        assert TopicPartition(refunds, 0) in owned
