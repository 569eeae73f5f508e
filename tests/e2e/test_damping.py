"""Damping on the real API server with the operator running (--tick 1): a policy whose static
lags flap every 1.5 s, always piling the two hot partitions on one replica of the published plan,
replans at most once per cooldown (8 s) and at least once; an autoscaled policy follows a lag
step up at once and a step down only after its scale-down window (8 s). Both run side by side
in one 24 s stretch. The API server refuses bad damping values naming the field."""

from __future__ import annotations

import copy
import itertools
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from tests.e2e.operator_support import Kubectl, OperatorProcess, cgp, settled
from tests.e2e.test_operator_lifecycle import policy
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

COOLDOWN_S = 8
DOWN_WINDOW_S = 8
FLAP_EVERY_S = 1.5
STRETCH_S = 24.0
STEP_UP_AT_S, STEP_DOWN_AT_S = 1.0, 7.0
LAG_DRIVEN = ("(ImbalanceExceeded)", "(Interval)")


def manifest(name: str, lags: list[int], *, consumers: dict[str, Any], **rebalance: Any) -> dict[str, Any]:
    """A `balanced` policy on static `lags` (test_operator_lifecycle's `policy`)."""
    return policy(
        name,
        0,
        strategy={"type": "balanced"},
        lagSource={"type": "static", "static": {"lags": {"t": lags}}},
        rebalance=rebalance,
        consumers=consumers,
    )


def flapping(lags: list[int]) -> dict[str, Any]:
    return manifest(
        "flap",
        lags,
        consumers={"replicas": 2},
        interval="1h",
        imbalanceThreshold=1.2,
        minImprovement=0.1,
        cooldownSeconds=COOLDOWN_S,
    )


def autoscaled(lags: list[int]) -> dict[str, Any]:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": DOWN_WINDOW_S}}
    return manifest(
        "scale",
        lags,
        consumers={"autoscale": {"min": 1, "max": 4, "targetLagPerReplica": 100, "behavior": behavior}},
    )


def hot_on_one_replica(status: dict[str, Any], current: list[int]) -> list[int]:
    """Two partitions of one replica of the published plan at 300, the others at 10: imbalance
    ~1.9, and moving one of them gives ~1.0 (current lags while a handoff is half way)."""
    full = [m for m in status.get("members") or [] if len(m["partitions"]) >= 2]
    if not full:
        return current
    lags = [10] * len(current)
    for name in full[0]["partitions"][:2]:
        lags[int(name.rsplit("-", 1)[1])] = 300
    return lags


def lag_driven_replans(kubectl: Kubectl, namespace: str, policy: str) -> list[datetime]:
    """When each lag-driven plan was published, from its `Rebalanced` Event (the operator's clock)."""
    events = kubectl.get_json("events", None, namespace) or {"items": []}
    return sorted(
        datetime.strptime(event["firstTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for event in events["items"]
        if event["involvedObject"]["name"] == policy
        and event["reason"] == "Rebalanced"
        and any(trigger in event["message"] for trigger in LAG_DRIVEN)
    )


def test_flapping_lag_replans_at_most_once_per_cooldown_and_autoscale_is_fast_up_slow_down(
    kubectl: Kubectl, namespace: str, module_operator: OperatorProcess
) -> None:
    flap_lags = [300, 10, 300, 10]
    kubectl.apply(flapping(flap_lags), namespace)
    kubectl.apply(autoscaled([50, 50]), namespace)
    wait_for("flap to settle", settled(kubectl, namespace, "flap"), timeout=60)
    scale = wait_for("scale to settle", settled(kubectl, namespace, "scale"), timeout=60)
    assert scale["status"]["replicas"] == 1

    started = datetime.now(UTC).replace(microsecond=0)
    begin = time.monotonic()
    next_flap, stepped_up, stepped_down = 0.0, None, None
    replicas_seen: list[tuple[float, int]] = []
    while (elapsed := time.monotonic() - begin) < STRETCH_S:
        if elapsed >= next_flap:
            flap_lags = hot_on_one_replica(cgp(kubectl, namespace, "flap").get("status") or {}, flap_lags)
            kubectl.apply(flapping(flap_lags), namespace)
            next_flap += FLAP_EVERY_S
        if stepped_up is None and elapsed >= STEP_UP_AT_S:
            kubectl.apply(autoscaled([200, 150]), namespace)  # 350: four replicas
            stepped_up = time.monotonic() - begin
        if stepped_down is None and elapsed >= STEP_DOWN_AT_S:
            kubectl.apply(autoscaled([50, 50]), namespace)  # 100: one replica
            stepped_down = time.monotonic() - begin
        replicas = (cgp(kubectl, namespace, "scale").get("status") or {}).get("replicas")
        replicas_seen.append((time.monotonic() - begin, int(replicas or 0)))
        time.sleep(0.2)
    assert stepped_up is not None and stepped_down is not None

    replans = [at for at in lag_driven_replans(kubectl, namespace, "flap") if at >= started]
    print(f"\nlag-driven replans at {[at.strftime('%H:%M:%S') for at in replans]}, cooldown {COOLDOWN_S} s")
    assert 1 <= len(replans) <= STRETCH_S // COOLDOWN_S + 1
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(replans)]
    assert all(gap >= COOLDOWN_S for gap in gaps), gaps

    def first(count: int, after: float) -> float:
        return next(at for at, seen in replicas_seen if at >= after and seen == count)

    up = first(4, stepped_up) - stepped_up
    down = first(1, stepped_down) - stepped_down
    print(f"autoscale: 4 replicas {up:.1f} s after the step up, 1 replica {down:.1f} s after the step down")
    assert up <= 3.0, "a step up is followed at the next tick"
    held = [seen for at, seen in replicas_seen if stepped_up + up <= at < stepped_down + DOWN_WINDOW_S - 1.5]
    assert held and set(held) == {4}, "no scale-down within the window"
    assert DOWN_WINDOW_S - 1.5 <= down <= DOWN_WINDOW_S + 4.0
    assert module_operator.alive()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(
            {"rebalance": {"minImprovement": 1.5}}, "spec.rebalance.minImprovement", id="improvement"
        ),
        pytest.param({"rebalance": {"cooldownSeconds": -1}}, "spec.rebalance.cooldownSeconds", id="cooldown"),
        pytest.param(
            {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 7200}}},
            "spec.consumers.autoscale.behavior.scaleDown.stabilizationWindowSeconds",
            id="down-window",
        ),
        pytest.param(
            {"behavior": {"scaleUp": {"stabilizationWindowSeconds": "1m"}}},
            "spec.consumers.autoscale.behavior.scaleUp.stabilizationWindowSeconds",
            id="up-window-type",
        ),
    ],
)
def test_the_api_server_refuses_bad_damping_values_naming_the_field(
    kubectl: Kubectl, namespace: str, change: dict[str, Any], field: str
) -> None:
    document = copy.deepcopy(autoscaled([1, 1]))
    document["metadata"]["name"] = "refused"
    if "rebalance" in change:
        document["spec"]["rebalance"] = change["rebalance"]
    else:
        document["spec"]["consumers"]["autoscale"]["behavior"] = change["behavior"]
    result = kubectl.run(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(document), check=False
    )
    assert result.returncode != 0
    assert field in result.stderr, result.stderr
