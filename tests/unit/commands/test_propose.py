"""`groupops propose`: the plan job's rows (Parquet, as the job writes them) become one proposal per
policy that runs the group, on the same cluster (brokers as written, or a ConsumerGroupCluster's
name or brokers); what cannot be proposed is skipped with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from groupops.cli import app
from groupops.commands.propose import proposals, read_plan_rows
from groupops.controller.pipeline_plan import pipeline_plan

PARTITION = pa.struct([("topic", pa.string()), ("partition", pa.int32())])
SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("group", pa.string()),
        ("strategy", pa.string()),
        ("member", pa.string()),
        ("partitions", pa.list_(PARTITION)),
        ("member_lag", pa.int64()),
        ("max_member_lag", pa.float64()),
        ("lower_bound", pa.float64()),
        ("imbalance", pa.float64()),
        ("moves", pa.int32()),
        ("error", pa.string()),
    ]
)


def row(
    cluster: str, group: str, member: str, partitions: list[int], error: str | None = None
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "group": group,
        "strategy": "lag",
        "member": member,
        "partitions": [{"topic": "t", "partition": p} for p in partitions],
        "member_lag": 10,
        "max_member_lag": 30.0,
        "lower_bound": 25.0,
        "imbalance": 1.2,
        "moves": 1,
        "error": error,
    }


def policy(
    name: str, group: str, *, approval: str = "manual", replicas: int = 2, **kafka: Any
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {
            "kafka": kafka or {"bootstrapServers": "kafka-1:9092,kafka-2:9092"},
            "groupId": group,
            "topics": ["t"],
            "rebalance": {"approval": approval},
            "consumers": {"replicas": replicas},
        },
        "status": {"replicas": replicas},
    }


def written_plan(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    directory = tmp_path / "plan"
    directory.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), directory / "part-0.parquet")
    return directory


def test_each_policy_on_the_planned_cluster_gets_the_plan_it_can_use(tmp_path: Path) -> None:
    rows = [
        row("KAFKA-2:9092", "orders", "orders-0", [0, 2]),
        row("KAFKA-2:9092", "orders", "orders-1", [1, 3]),
        row("prod", "billing", "billing-0", [0, 1]),
        row("kafka-1:9092", "stuck", "", [], error="a group without owners"),
        row("kafka-1:9092", "auto", "auto-0", [0]),
        row("kafka-1:9092", "stranger", "someone-else", [0]),
        row("other:9092", "elsewhere", "elsewhere-0", [0]),
    ]
    policies = [
        policy("orders", "orders"),
        policy("billing", "billing", clusterRef={"name": "prod"}),
        policy("stuck", "stuck"),
        policy("auto", "auto", approval="auto"),
        policy("stranger", "stranger"),
        policy("elsewhere", "elsewhere"),
    ]
    found = proposals(
        read_plan_rows(written_plan(tmp_path, rows)),
        policies,
        [],
        source="/out/plan",
        created_at="2026-11-27T00:00:00Z",
    )
    by_name = {item["name"]: item for item in found}
    assert sorted(by_name) == ["auto", "billing", "orders", "stranger", "stuck"], "elsewhere: another cluster"
    assert by_name["orders"]["action"] == by_name["billing"]["action"] == "propose"
    annotation = json.loads(by_name["orders"]["annotation"])
    assert annotation["assignment"] == {"orders-0": ["t-0", "t-2"], "orders-1": ["t-1", "t-3"]}
    assert annotation["source"] == "/out/plan"
    assert "could not plan the group: a group without owners" in by_name["stuck"]["reason"]
    assert "approval is auto" in by_name["auto"]["reason"]
    assert "someone-else is not an identity of this policy" in by_name["stranger"]["reason"]
    plan = pipeline_plan(
        {"groupops.dev/pipeline-plan": by_name["orders"]["annotation"]},
        members={"orders-0", "orders-1"},
        everyone=["orders-0", "orders-1"],
        topics={"t": 4},
        applied=None,
    )
    assert plan is not None and plan.entries is not None, "what the command writes, the operator reads"


def test_a_cluster_resource_is_matched_by_its_brokers_too() -> None:
    clusters = [{"metadata": {"name": "prod"}, "spec": {"bootstrapServers": "broker-1:9093"}}]
    found = proposals(
        [row("broker-1:9093", "billing", "billing-0", [0])],
        [policy("billing", "billing", clusterRef={"name": "prod"})],
        clusters,
        source="s",
        created_at="t",
    )
    assert [item["action"] for item in found] == ["propose"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda p: p / "nope", "does not exist", id="missing"),
        pytest.param(
            lambda p: (p / "x.txt").write_text("no") and p / "x.txt",
            "not a Parquet dataset",
            id="not-parquet",
        ),
    ],
)
def test_a_bad_plan_directory_is_exit_2_naming_the_option(tmp_path: Path, make: Any, message: str) -> None:
    result = CliRunner().invoke(app, ["propose", "--plan", str(make(tmp_path))])
    assert result.exit_code == 2
    assert message in result.output and "--plan" in result.output
