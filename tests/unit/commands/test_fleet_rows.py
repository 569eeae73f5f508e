"""`groupops fleet` rows: a cluster's policies only, furthest from their goal first (time lag over
the goal, else imbalance), with the partitions their plan still releases and what the plan waits
for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from groupops.commands.fleet import fleet_rows
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release, render_plan_configmap

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def policy(
    name: str, *, cluster: str | None = "prod", goal: float | None = None, **status: Any
) -> dict[str, Any]:
    kafka = {"clusterRef": {"name": cluster}} if cluster else {"bootstrapServers": "kafka:9092"}
    spec: dict[str, Any] = {"kafka": kafka, "groupId": f"{name}-g"}
    if goal is not None:
        spec["targetTimeLagSeconds"] = goal
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": status}


def test_rows_are_the_clusters_policies_furthest_from_their_goal_first() -> None:
    policies = [
        policy("balanced", imbalance=1.05, totalLag=10),
        policy("behind", goal=60, timeLagSeconds=300, imbalance=1.1),  # 5x its goal
        policy("skewed", imbalance=2.5, lastRebalance="2026-01-01T11:58:00Z"),
        policy("elsewhere", cluster="staging", imbalance=9.0),
        policy("inline", cluster=None, imbalance=9.0),
    ]
    rows = fleet_rows(policies, [], cluster="prod", now=NOW)
    assert [row["name"] for row in rows] == ["behind", "skewed", "balanced"]
    assert rows[0]["fromGoal"] == 5.0 and rows[0]["targetTimeLagSeconds"] == 60
    assert rows[1]["sinceRebalanceSeconds"] == 120
    everyone = fleet_rows(policies, [], cluster=None, now=NOW)
    assert {row["cluster"] for row in everyone} == {"prod", "staging", "kafka:9092"}


def test_partitions_in_flight_come_from_the_plan_and_the_plan_state_from_the_conditions() -> None:
    release = Release(identity=MemberId("w-g-0"), epoch=2)
    plan = PublishedPlan(
        plan=Plan(epoch=3, strategy="lag", assignment={}),
        releasing={TopicPartition("t", 0): release, TopicPartition("t", 1): release},
    )
    configmap = render_plan_configmap("ns", "waiting", plan)
    conditions = [
        {"type": "Ready", "status": "True", "reason": "Reconciled"},
        {"type": "PlanApplied", "status": "False", "reason": "WaitingForBudget"},
    ]
    refused = [{"type": "Ready", "status": "False", "reason": "ClusterNotAllowed"}]
    rows = fleet_rows(
        [policy("waiting", conditions=conditions), policy("refused", conditions=refused)],
        [configmap],
        cluster="prod",
        now=NOW,
    )
    by_name = {row["name"]: row for row in rows}
    assert by_name["waiting"]["partitionsInFlight"] == 2 and by_name["waiting"]["plan"] == "WaitingForBudget"
    assert by_name["refused"]["partitionsInFlight"] == 0 and by_name["refused"]["plan"] == "ClusterNotAllowed"
