"""Status is written only when it changed; conditions keep their transition time while steady; a
change of lag figures alone is told apart from any other (report.py holds those back)."""

from __future__ import annotations

from typing import Any

import pytest

from groupops.controller.status import Condition, figures_only, merge_conditions, status_patch

READY = Condition("Ready", True, "Reconciled", "ok")


def test_steady_condition_keeps_its_transition_time() -> None:
    first = merge_conditions(None, [READY], generation=1, now="2025-01-01T00:00:00Z")
    again = merge_conditions(
        first, [Condition("Ready", True, "Reconciled", "ok")], generation=1, now="2025-01-02T00:00:00Z"
    )
    assert again == first


def test_flipped_condition_moves_its_transition_time() -> None:
    first = merge_conditions(None, [READY], generation=1, now="2025-01-01T00:00:00Z")
    flipped = merge_conditions(
        first, [Condition("Ready", False, "InvalidSpec", "bad")], generation=2, now="2025-01-02T00:00:00Z"
    )
    assert flipped[0]["lastTransitionTime"] == "2025-01-02T00:00:00Z"
    assert flipped[0]["status"] == "False"
    assert flipped[0]["observedGeneration"] == 2


def test_conditions_come_in_a_fixed_order() -> None:
    conditions = [
        Condition("Degraded", False, "AsExpected"),
        Condition("PlanApplied", True, "Published"),
        READY,
    ]
    merged = merge_conditions(None, conditions, generation=1, now="t")
    assert [c["type"] for c in merged] == ["Ready", "PlanApplied", "Degraded"]


def test_no_patch_when_nothing_changed() -> None:
    status = {"epoch": 3, "members": [{"instanceId": "g-0"}], "kopf": {"x": 1}}
    assert status_patch(status, {"epoch": 3, "members": [{"instanceId": "g-0"}]}) is None


def test_patch_holds_only_what_changed_and_removes_what_went() -> None:
    status = {"epoch": 3, "totalLag": 10, "proposal": {"moves": 2}}
    patch = status_patch(status, {"epoch": 4, "totalLag": 10, "proposal": None})
    assert patch == {"epoch": 4, "proposal": None}


def test_fields_of_others_are_never_touched() -> None:
    assert status_patch({"kopf": {"progress": {}}}, {"epoch": 1}) == {"epoch": 1}


STEADY: dict[str, Any] = {
    "epoch": 3,
    "conditions": [{"type": "Ready", "status": "True"}],
    "totalLag": 2100,
    "maxMemberLag": 1100.0,
    "imbalance": 1.048,
    "timeLagSeconds": 4.2,
    "members": [
        {"instanceId": "g-0", "partitions": ["t-0", "t-5"], "lag": 700, "timeLagSeconds": 3.0},
        {
            "instanceId": "g-1",
            "partitions": ["t-1", "t-4"],
            "lag": 700,
            "progress": {"sinceProgressSeconds": 12, "heardAt": "t1"},
        },
    ],
}


def moved(**changes: Any) -> dict[str, Any]:
    return {**STEADY, **changes}


def members_with(index: int, **changes: Any) -> list[dict[str, Any]]:
    members = [dict(m) for m in STEADY["members"]]
    members[index].update(changes)
    return members


@pytest.mark.parametrize(
    "desired",
    [
        pytest.param(
            moved(totalLag=2160, maxMemberLag=1130.0, imbalance=1.05, timeLagSeconds=5.0), id="figures"
        ),
        pytest.param(moved(members=members_with(0, lag=730, timeLagSeconds=3.5)), id="member-figures"),
        pytest.param(
            moved(members=members_with(1, progress={"sinceProgressSeconds": 14, "heardAt": "t2"})),
            id="progress-ages",
        ),
    ],
)
def test_lag_figures_that_move_are_figures_only(desired: dict[str, Any]) -> None:
    assert figures_only(STEADY, desired)


@pytest.mark.parametrize(
    "desired",
    [
        pytest.param(STEADY, id="nothing-differs"),
        pytest.param(moved(totalLag=2160, epoch=4), id="epoch"),
        pytest.param(moved(conditions=[{"type": "Ready", "status": "False"}]), id="condition"),
        pytest.param(moved(members=members_with(0, partitions=["t-0"])), id="partitions"),
        pytest.param(moved(members=STEADY["members"][:1]), id="a-member-left"),
        pytest.param(moved(totalLag=0), id="caught-up"),
        pytest.param(moved(members=members_with(1, lag=0)), id="member-caught-up"),
        pytest.param(moved(timeLagSeconds=None), id="time-lag-unknown"),
        pytest.param(moved(members=members_with(1, timeLagSeconds=2.0)), id="member-time-lag-appears"),
        pytest.param(
            moved(members=members_with(1, progress={"sinceProgressSeconds": 12, "heardAt": "t1", "x": 1})),
            id="progress-field-appears",
        ),
        pytest.param(
            moved(members=members_with(0, progress={"sinceProgressSeconds": 11})), id="shown-behind"
        ),
    ],
)
def test_anything_else_is_not_figures_only(desired: dict[str, Any]) -> None:
    assert not figures_only(STEADY, desired)


def test_a_lag_leaving_zero_is_not_figures_only() -> None:
    assert not figures_only(moved(totalLag=0), STEADY)
