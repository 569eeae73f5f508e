"""`plan` (a grouped pandas UDF over every group at once) gives, for 100 groups, exactly what
`groupops assign` gives for each group's document: the same assignment to the partition, the
same stats."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from groupops.cli import app
from groupops.contract import group_to_json
from groupops.model import GroupInput, Member, MemberId, TopicPartition
from groupops.pipeline import plan

pytestmark = pytest.mark.pipeline

GROUPS = 100
STRATEGIES = ("lag", "range", "sticky", "balanced")


def random_group(rng: random.Random) -> GroupInput:
    """1-3 topics of 1-12 partitions, skewed lags, members that each own at least one partition
    (members owning nothing are invisible in snapshots, so the plan cannot know them)."""
    topics = {f"topic-{t}": rng.randint(1, 12) for t in range(rng.randint(1, 3))}
    partitions = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
    count = rng.randint(1, min(6, len(partitions)))
    names = sorted(rng.sample([f"consumer-{i:02d}" for i in range(20)], count))
    rng.shuffle(partitions)
    owned: dict[str, list[TopicPartition]] = {name: [partitions[i]] for i, name in enumerate(names)}
    for tp in partitions[count:]:
        if rng.random() < 0.9:
            owned[rng.choice(names)].append(tp)
    members = tuple(
        Member(member_id=MemberId(name), topics=frozenset(topics), owned=tuple(sorted(owned[name])))
        for name in names
    )
    lags = {t: [int(rng.paretovariate(1.2) * 1000) for _ in range(count)] for t, count in topics.items()}
    return GroupInput(topics=topics, members=members, lags=lags)


def lag_rows(name: str, group: GroupInput) -> list[tuple[str, str, str, int, int, str]]:
    owner = {tp: m.member_id for m in group.members for tp in m.owned}
    return [
        ("c1", name, topic, p, int(group.lags[topic][p]), owner.get(TopicPartition(topic, p), ""))
        for topic, count in group.topics.items()
        for p in range(count)
    ]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_plan_equals_groupops_assign_for_100_groups(spark: SparkSession, strategy: str) -> None:
    rng = random.Random(f"plan-{strategy}")
    groups = {f"group-{i:03d}": random_group(rng) for i in range(GROUPS)}
    rows = [row for name, group in groups.items() for row in lag_rows(name, group)]
    lags = spark.createDataFrame(
        rows, "cluster string, group string, topic string, partition int, lag long, member string"
    )

    planned = plan.plan(lags, strategy=strategy).collect()

    by_group: dict[str, dict[str, list[list[str | int]]]] = {}
    stats: dict[str, tuple[float, int]] = {}
    for row in planned:
        assert row["error"] is None
        by_group.setdefault(row["group"], {})[row["member"]] = [
            [tp["topic"], tp["partition"]] for tp in row["partitions"]
        ]
        stats[row["group"]] = (row["max_member_lag"], row["moves"])
    assert set(by_group) == set(groups)
    runner = CliRunner()
    for name, group in groups.items():
        result = runner.invoke(app, ["assign"], input=json.dumps(group_to_json(strategy, group)))
        assert result.exit_code == 0, result.output
        cli = json.loads(result.stdout)
        assert by_group[name] == cli["assignment"], name
        assert stats[name] == (cli["stats"]["max_member_lag"], cli["stats"]["moves"]), name


def test_a_group_without_owners_gets_an_error_row(spark: SparkSession) -> None:
    lags = spark.createDataFrame(
        [("c1", "orphan", "t", 0, 5, ""), ("c1", "orphan", "t", 1, 7, "")],
        "cluster string, group string, topic string, partition int, lag long, member string",
    )
    (row,) = plan.plan(lags, strategy="lag").collect()
    assert row["member"] is None
    assert "no member" in row["error"]


def test_group_document_is_the_assign_contract() -> None:
    document = plan.group_document(
        "lag", [("b", 1, 5, "m2"), ("a", 0, 3, "m1"), ("b", 0, 0, ""), ("a", 1, 9, "m1")]
    )
    assert document == {
        "strategy": "lag",
        "topics": {"a": 2, "b": 2},
        "members": [
            {"member_id": "m1", "topics": ["a", "b"], "owned": [["a", 0], ["a", 1]]},
            {"member_id": "m2", "topics": ["a", "b"], "owned": [["b", 1]]},
        ],
        "lags": {"a": [3, 9], "b": [0, 5]},
    }
