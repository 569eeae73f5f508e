"""Status is written only when it changed; conditions keep their transition time while steady."""

from __future__ import annotations

from groupops.controller.status import Condition, merge_conditions, status_patch

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
