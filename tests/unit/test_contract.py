"""The `groupops assign` contract (docs/design.md §3.3): JSON group in, `{"assignment", "stats"}` out; every
member present, lists sorted; `--format table` for people; bad input exits 2 with one line on
stderr that names the field, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from groupops.assign import get_strategy
from groupops.cli import app
from groupops.contract import (
    InputError,
    assignment_to_json,
    group_to_json,
    parse_group,
    parse_group_text,
    render_result,
)
from groupops.model import TopicPartition

runner = CliRunner()


def invoke(*args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, ["assign", *args], input=stdin)


def document(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "strategy": "balanced",
        "topics": {"orders": 4, "payments": 2},
        "members": [
            {
                "member_id": "b-1",
                "group_instance_id": "w-1",
                "topics": ["orders", "payments"],
                "capacity": 2.0,
            },
            {"member_id": "a-0", "topics": ["orders", "payments"], "owned": [["orders", 3]], "generation": 4},
            {"member_id": "c-2", "topics": ["payments"]},
            {"member_id": "idle", "topics": []},
        ],
        "lags": {"orders": [500, 10, 20, 300], "payments": [7, 0]},
    }
    base.update(changes)
    return base


def run_ok(*args: str, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    result = invoke(*args, stdin=json.dumps(doc or document()))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


STRATEGIES = ["range", "roundrobin", "sticky", "cooperative-sticky", "lag", "failover", "balanced"]


class TestOutput:
    @pytest.mark.parametrize("strategy", STRATEGIES)
    def test_every_member_present_lists_sorted_stats_complete(self, strategy: str) -> None:
        out = run_ok("--strategy", strategy)
        assignment = out["assignment"]
        assert set(assignment) == {"b-1", "a-0", "c-2", "idle"}
        for partitions in assignment.values():
            assert partitions == sorted(partitions)
            assert all(isinstance(t, str) and isinstance(p, int) for t, p in partitions)
        assert assignment["idle"] == []
        stats = out["stats"]
        assert set(stats) == {
            "members",
            "total_lag",
            "max_member_lag",
            "lower_bound",
            "imbalance",
            "moves",
            "dropped",
            "unassigned",
            "missing_topics",
        }
        assert set(stats["members"]) == set(assignment)
        assert all(set(m) == {"count", "lag", "weighted_lag"} for m in stats["members"].values())
        assert stats["total_lag"] == 837 or strategy == "cooperative-sticky"

    def test_input_file_and_stdin_agree(self, tmp_path: Path) -> None:
        path = tmp_path / "group.json"
        path.write_text(json.dumps(document()), encoding="utf-8")
        assert run_ok("--input", str(path)) == run_ok()

    def test_strategy_from_the_document(self) -> None:
        # range: the static member b-1 comes first in Kafka's order, then a-0, then c-2.
        assert run_ok(doc=document(strategy="range"))["assignment"] == {
            "b-1": [["orders", 0], ["orders", 1], ["payments", 0]],
            "a-0": [["orders", 2], ["orders", 3], ["payments", 1]],
            "c-2": [],
            "idle": [],
        }

    def test_balanced_stats_figures(self) -> None:
        stats = run_ok()["stats"]
        assert stats["unassigned"] == 0
        assert stats["max_member_lag"] >= stats["lower_bound"] > 0
        assert stats["imbalance"] == pytest.approx(stats["max_member_lag"] / stats["lower_bound"])

    def test_table_for_people(self) -> None:
        result = invoke("--format", "table", stdin=json.dumps(document()))
        assert result.exit_code == 0, result.stderr
        for needle in (
            "strategy balanced",
            "b-1",
            "a-0",
            "c-2",
            "idle",
            "max member lag",
            "lower bound",
            "moves",
        ):
            assert needle in result.stdout


class TestTopicsOutOfStepWithTheMetadata:
    """Members may report subscriptions and owned partitions the metadata no longer (or not yet)
    holds, as after a topic is deleted or recreated; Kafka's assignors take that as normal."""

    @pytest.mark.parametrize("strategy", STRATEGIES)
    def test_a_subscription_to_a_missing_topic_gets_nothing_and_is_named(self, strategy: str) -> None:
        out = run_ok("--strategy", strategy, doc=with_member(2, topics=["payments", "refunds"]))
        assert out["stats"]["missing_topics"] == ["refunds"]
        assert all(topic != "refunds" for partitions in out["assignment"].values() for topic, _ in partitions)

    @pytest.mark.parametrize("strategy", STRATEGIES)
    def test_owned_partitions_that_no_longer_exist_are_dropped_as_moves(self, strategy: str) -> None:
        doc = with_member(1, owned=[["orders", 3], ["orders", 9], ["refunds", 0]])
        out = run_ok("--strategy", strategy, doc=doc)
        assert out["stats"]["dropped"] == 2
        assert out["stats"]["moves"] >= 2
        assigned = [tuple(tp) for partitions in out["assignment"].values() for tp in partitions]
        assert ("orders", 9) not in assigned and ("refunds", 0) not in assigned

    def test_the_table_says_what_was_dropped_and_what_is_missing(self) -> None:
        doc = with_member(1, topics=["orders", "refunds"], owned=[["refunds", 0]])
        result = invoke("--format", "table", stdin=json.dumps(doc))
        assert result.exit_code == 0, result.stderr
        assert "dropped 1 owned partitions that no longer exist" in result.stdout
        assert "refunds" in result.stdout


def with_member(index: int, **changes: Any) -> dict[str, Any]:
    doc = document()
    doc["members"][index] = {**doc["members"][index], **changes}
    return doc


class TestParser:
    """`parse_group_text` (the CLI, the Kafka harness) and `parse_group` (the Spark job, on a
    loaded document) build the same engine input and report the same errors."""

    def test_text_and_loaded_document_give_the_same_group(self) -> None:
        doc = document()
        strategy, group = parse_group_text(json.dumps(doc))
        again = parse_group(doc)[1]
        assert strategy == "balanced"
        assert group.members == again.members
        assert {t: list(v) for t, v in group.lags.items()} == {t: list(v) for t, v in again.lags.items()}

    def test_group_to_json_is_the_inverse(self) -> None:
        _, group = parse_group_text(json.dumps(document()))
        assert group_to_json("balanced", group) == {
            **document(),
            "members": group_to_json("x", group)["members"],
        }
        _, again = parse_group(group_to_json("balanced", group))
        assert again.members == group.members

    def test_owned_partitions_are_topic_partitions(self) -> None:
        _, group = parse_group_text(json.dumps(document()))
        owned = group.members[1].owned
        assert owned == (TopicPartition("orders", 3),)
        assert isinstance(owned[0], TopicPartition)
        assert str(owned[0]) == "orders-3"
        assert hash(owned[0]) == hash(TopicPartition("orders", 3))

    def test_members_with_one_subscription_share_it(self) -> None:
        doc = document(
            members=[
                {"member_id": "a", "topics": ["orders", "payments"]},
                {"member_id": "b", "topics": ["payments"]},
                {"member_id": "c", "topics": ["orders", "payments"]},
            ]
        )
        _, group = parse_group_text(json.dumps(doc))
        a, b, c = group.members
        assert a.topics is c.topics
        assert a.topics == frozenset({"orders", "payments"}) and b.topics == frozenset({"payments"})

    def test_lags_are_int64_arrays(self) -> None:
        _, group = parse_group_text(json.dumps(document()))
        lags = group.lags["orders"]
        assert isinstance(lags, np.ndarray) and lags.dtype == np.int64
        assert lags.tolist() == [500, 10, 20, 300]

    @pytest.mark.parametrize(
        ("doc", "where"),
        [
            pytest.param(
                with_member(1, owned=[["orders", -1]]), "members[1].owned[0][1]", id="negative-partition"
            ),
            pytest.param(
                with_member(2, topics=["orders", 7]), "members[2].topics[1]", id="topic-not-a-string"
            ),
            pytest.param(document(lags={"orders": [1, 2, 3, -4]}), "lags.orders[3]", id="negative-lag"),
            pytest.param(
                document(topics={"orders": 4, "payments": -2}), "topics.payments", id="negative-count"
            ),
            pytest.param(
                document(lags={"orders": [2**63, 0, 0, 0]}), "lags.orders[0]", id="lag-beyond-int64"
            ),
        ],
    )
    def test_both_entry_points_name_the_same_field(self, doc: dict[str, Any], where: str) -> None:
        text = json.dumps(doc)
        with pytest.raises(InputError) as from_text:
            parse_group_text(text)
        with pytest.raises(InputError) as from_document:
            parse_group(json.loads(text))
        assert from_text.value.field == from_document.value.field == where
        assert from_text.value.message == from_document.value.message

    def test_an_infinite_capacity(self) -> None:
        text = json.dumps(with_member(0, capacity=12345)).replace("12345", "1e400")
        with pytest.raises(InputError) as error:
            parse_group_text(text)
        assert error.value.field == "members[0].capacity"
        with pytest.raises(InputError) as error:
            parse_group(with_member(0, capacity=float("inf")))
        assert error.value.field == "members[0].capacity"

    def test_a_loaded_document_that_is_not_json_data(self) -> None:
        with pytest.raises(InputError) as error:
            parse_group({"strategy": "range", "topics": {"t": object()}, "members": []})
        assert error.value.field == "<document>"


class TestRenderedOutput:
    def test_the_output_is_the_assignment_as_sorted_pairs(self) -> None:
        _, group = parse_group_text(json.dumps(document()))
        for strategy in STRATEGIES:
            assignment = get_strategy(strategy)(group)
            out = json.loads(render_result(assignment, {"moves": 0}))
            assert out == {"assignment": assignment_to_json(assignment), "stats": {"moves": 0}}


BAD_INPUTS = [
    pytest.param(json.dumps(document(strategy="nope")), "(strategy)", id="unknown-strategy"),
    pytest.param(json.dumps(document(lags={"orders": [1, 2, -3, 4]})), "(lags.orders[2])", id="negative-lag"),
    pytest.param(
        json.dumps(document(lags={"orders": [1, 2, 3]})), "(lags.orders)", id="lag-count-not-partitions"
    ),
    pytest.param(
        json.dumps(with_member(1, member_id="b-1")), "(members[1].member_id)", id="duplicate-member-id"
    ),
    pytest.param(
        json.dumps(with_member(1, group_instance_id="w-1")),
        "(members[1].group_instance_id)",
        id="duplicate-instance-id",
    ),
    pytest.param('{"strategy": "balanced", "topics": {', "(<document>)", id="malformed-json"),
    pytest.param(
        json.dumps(with_member(1, owned=[["orders", -1]])),
        "(members[1].owned[0][1])",
        id="negative-partition",
    ),
    pytest.param(
        json.dumps(with_member(1, owned=[["orders", 1], ["orders", 1]])),
        "(members[1].owned[1])",
        id="owned-twice-by-one-member",
    ),
    pytest.param(
        json.dumps(with_member(1, owned=[["orders"]])), "(members[1].owned[0])", id="owned-not-a-pair"
    ),
    pytest.param(json.dumps(with_member(1, topics="orders")), "(members[1].topics)", id="topics-not-a-list"),
    pytest.param(json.dumps(document(lags={"refunds": [1]})), "(lags.refunds)", id="lags-of-unknown-topic"),
    pytest.param(
        json.dumps(document(partition_racks={"refunds": [["r1"]]})),
        "(partition_racks.refunds)",
        id="racks-of-unknown-topic",
    ),
    pytest.param(json.dumps(with_member(0, capacity=0)), "(members[0].capacity)", id="zero-capacity"),
    pytest.param(json.dumps([1, 2]), "(<document>)", id="not-an-object"),
]


class TestBadInput:
    @pytest.mark.parametrize(("text", "where"), BAD_INPUTS)
    def test_exit_2_one_line_naming_the_field(self, text: str, where: str) -> None:
        result = invoke(stdin=text)
        self.assert_one_line_error(result, where)

    def test_input_that_is_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "latin1.json"
        path.write_bytes('{"strategy": "rangé"}'.encode("latin-1"))
        self.assert_one_line_error(invoke("--input", str(path)), f"(--input {path})")
        result = runner.invoke(app, ["assign"], input='{"strategy": "rangé"}'.encode("latin-1"))
        self.assert_one_line_error(result, "(stdin)")

    def test_missing_file(self, tmp_path: Path) -> None:
        missing = tmp_path / "absent.json"
        result = invoke("--input", str(missing))
        self.assert_one_line_error(result, f"(--input {missing})")

    def test_unknown_strategy_flag(self) -> None:
        result = invoke("--strategy", "fastest", stdin=json.dumps(document()))
        self.assert_one_line_error(result, "(--strategy)")

    @staticmethod
    def assert_one_line_error(result: Any, where: str) -> None:
        assert result.exit_code == 2, (result.stdout, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: ")
        assert lines[0].endswith(where)
        assert "Traceback" not in result.stderr
        assert result.exception is None or isinstance(result.exception, SystemExit)
