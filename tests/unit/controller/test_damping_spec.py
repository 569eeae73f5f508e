"""The damping fields of the spec: spec.rebalance.minImprovement and cooldownSeconds,
spec.consumers.autoscale.behavior.scaleUp/scaleDown.stabilizationWindowSeconds. Defaults as
the CRD's, every bad value refused naming its field and saying what it should be, and the CRD
declaring the same bounds (the API server refuses what the operator refuses)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from groupops.controller.spec import SpecError, parse_policy
from groupops.planner.damping import ScaleWindows

BASE: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "orders",
    "topics": ["orders"],
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3]}}},
}
CRD = yaml.safe_load((Path(__file__).parents[3] / "crds" / "consumergrouppolicy.yaml").read_text())
SPEC_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def with_rebalance(**rebalance: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec["rebalance"] = rebalance
    return spec


def with_behavior(behavior: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec["consumers"] = {"autoscale": {"max": 4, "targetLagPerReplica": 10, "behavior": behavior}}
    return spec


def test_defaults_damp_as_documented() -> None:
    spec = parse_policy(with_behavior({}))
    assert spec.rebalance.min_improvement == 0.1
    assert spec.rebalance.cooldown_seconds == 30.0
    assert spec.consumers.autoscale is not None
    assert spec.consumers.autoscale.windows == ScaleWindows(up_seconds=0.0, down_seconds=300.0)
    assert parse_policy(BASE).rebalance.cooldown_seconds == 30.0


def test_values_given_are_used() -> None:
    spec = parse_policy(with_rebalance(minImprovement=0, cooldownSeconds=0))
    assert (spec.rebalance.min_improvement, spec.rebalance.cooldown_seconds) == (0.0, 0.0)
    scaled = parse_policy(
        with_behavior(
            {"scaleUp": {"stabilizationWindowSeconds": 15}, "scaleDown": {"stabilizationWindowSeconds": 3600}}
        )
    ).consumers.autoscale
    assert scaled is not None and scaled.windows == ScaleWindows(up_seconds=15.0, down_seconds=3600.0)


WINDOW = "spec.consumers.autoscale.behavior.scaleDown.stabilizationWindowSeconds"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            with_rebalance(minImprovement=-0.1),
            "spec.rebalance.minImprovement",
            "expected a number in [0, 0.9], got -0.1",
            id="improvement-negative",
        ),
        pytest.param(
            with_rebalance(minImprovement=1),
            "spec.rebalance.minImprovement",
            "expected a number in [0, 0.9], got 1",
            id="improvement-whole",
        ),
        pytest.param(
            with_rebalance(minImprovement="10%"),
            "spec.rebalance.minImprovement",
            "got '10%'",
            id="improvement-percent-string",
        ),
        pytest.param(
            with_rebalance(cooldownSeconds=-1),
            "spec.rebalance.cooldownSeconds",
            "expected an integer in [0, 86400], got -1",
            id="cooldown-negative",
        ),
        pytest.param(
            with_rebalance(cooldownSeconds=86_401),
            "spec.rebalance.cooldownSeconds",
            "expected an integer in [0, 86400], got 86401",
            id="cooldown-over-a-day",
        ),
        pytest.param(
            with_rebalance(cooldownSeconds="30s"),
            "spec.rebalance.cooldownSeconds",
            "got '30s'",
            id="cooldown-duration-string",
        ),
        pytest.param(
            with_rebalance(cooldownSeconds=1.5),
            "spec.rebalance.cooldownSeconds",
            "got 1.5",
            id="cooldown-fraction",
        ),
        pytest.param(
            with_behavior({"scaleDown": {"stabilizationWindowSeconds": -5}}),
            WINDOW,
            "expected an integer in [0, 3600], got -5",
            id="down-window-negative",
        ),
        pytest.param(
            with_behavior({"scaleUp": {"stabilizationWindowSeconds": 3601}}),
            "spec.consumers.autoscale.behavior.scaleUp.stabilizationWindowSeconds",
            "expected an integer in [0, 3600], got 3601",
            id="up-window-over-an-hour",
        ),
        pytest.param(
            with_behavior({"scaleDown": {"stabilizationWindowSeconds": True}}),
            WINDOW,
            "got True",
            id="down-window-boolean",
        ),
        pytest.param(
            with_behavior({"scaleDown": {"policies": []}}),
            "spec.consumers.autoscale.behavior.scaleDown.policies",
            "unknown field",
            id="hpa-policies-not-supported",
        ),
        pytest.param(
            with_behavior({"scaledown": {}}),
            "spec.consumers.autoscale.behavior.scaledown",
            "unknown field",
            id="misspelt-direction",
        ),
        pytest.param(
            with_behavior([]),
            "spec.consumers.autoscale.behavior",
            "expected object, got array",
            id="behavior-not-an-object",
        ),
    ],
)
def test_a_bad_damping_value_is_refused_naming_its_field(
    spec: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(spec)
    assert caught.value.field == field
    assert message in caught.value.message


def test_the_crd_declares_the_same_bounds_and_defaults() -> None:
    # No schema default for these two: a ConsumerGroupCluster may default them (cluster_spec.py);
    # the operator's own defaults are the ones the descriptions name.
    rebalance = SPEC_SCHEMA["rebalance"]["properties"]
    assert {k: rebalance["minImprovement"].get(k) for k in ("type", "default", "minimum", "maximum")} == {
        "type": "number",
        "default": None,
        "minimum": 0,
        "maximum": 0.9,
    }
    assert {k: rebalance["cooldownSeconds"].get(k) for k in ("type", "default", "minimum", "maximum")} == {
        "type": "integer",
        "default": None,
        "minimum": 0,
        "maximum": 86_400,
    }
    unset = parse_policy(with_rebalance()).rebalance
    assert (unset.min_improvement, unset.cooldown_seconds) == (0.1, 30)
    assert "Default 0.1," in rebalance["minImprovement"]["description"]
    assert "Default 30," in rebalance["cooldownSeconds"]["description"]
    behavior = SPEC_SCHEMA["consumers"]["properties"]["autoscale"]["properties"]["behavior"]
    assert behavior["default"] == {}
    for direction, default in (("scaleUp", 0), ("scaleDown", 300)):
        rule = behavior["properties"][direction]
        assert rule["default"] == {}
        window = rule["properties"]["stabilizationWindowSeconds"]
        assert (window["type"], window["default"], window["minimum"], window["maximum"]) == (
            "integer",
            default,
            0,
            3600,
        )
