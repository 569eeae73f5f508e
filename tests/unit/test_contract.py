"""The `groupops assign` contract (docs/design.md §3.3): JSON group in, `{"assignment", "stats"}` out; every
member present, lists sorted; `--format table` for people; bad input exits 2 with one line on
stderr that names the field, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from groupops.cli import app

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
            "unassigned",
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


def with_member(index: int, **changes: Any) -> dict[str, Any]:
    doc = document()
    doc["members"][index] = {**doc["members"][index], **changes}
    return doc


BAD_INPUTS = [
    pytest.param(json.dumps(document(strategy="nope")), "(strategy)", id="unknown-strategy"),
    pytest.param(
        json.dumps(with_member(2, topics=["refunds"])), "(members[2].topics[0])", id="unknown-topic"
    ),
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
        json.dumps(with_member(1, owned=[["orders", 4]])), "(members[1].owned[0])", id="owned-out-of-range"
    ),
    pytest.param(json.dumps(document(lags={"refunds": [1]})), "(lags.refunds)", id="lags-of-unknown-topic"),
    pytest.param(json.dumps(with_member(0, capacity=0)), "(members[0].capacity)", id="zero-capacity"),
    pytest.param(json.dumps([1, 2]), "(<document>)", id="not-an-object"),
]


class TestBadInput:
    @pytest.mark.parametrize(("text", "where"), BAD_INPUTS)
    def test_exit_2_one_line_naming_the_field(self, text: str, where: str) -> None:
        result = invoke(stdin=text)
        self.assert_one_line_error(result, where)

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
