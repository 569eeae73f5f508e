"""The example policies (examples/policies/*.yaml) as the demo (devstack/demo.py) applies them to
the local stack: pointed at the local broker, with lagSource kafka where the example has static
lag, and on a running stack with topic and group names of their own. Each change is listed, so
that the demo can say what it changed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from groupops.devstack.errors import DemoError

__all__ = ["CRD", "EXAMPLES", "PolicyInfo", "adapt_example", "static_lags"]

ROOT = Path(__file__).resolve().parents[3]
"""The repository checkout this package is installed from (`pip install -e`, as `make` does)."""
EXAMPLES = ROOT / "examples" / "policies"
CRD = ROOT / "crds" / "consumergrouppolicy.yaml"


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyInfo:
    """An example policy as applied: its names, and what the demo changed in it. `partitions`:
    its topic's partition count, the length of the example's static lag list."""

    name: str
    group: str
    topic: str
    partitions: int
    replicas: int
    document: dict[str, Any]
    changes: tuple[str, ...]

    def pod(self, ordinal: int) -> str:
        return f"{self.name}-{ordinal}"


DEMO_COOLDOWN_S = 3
"""spec.rebalance.cooldownSeconds of the demo's policies (docs/design.md §6.5)."""


def adapt_example(example: str, *, bootstrap: str, suffix: str) -> PolicyInfo:
    """examples/policies/<example>.yaml for the local broker: bootstrapServers, lagSource kafka
    instead of static lag, a short replan cooldown, and (`suffix`, on a running stack) topic and
    group names of its own."""
    path = EXAMPLES / f"{example}.yaml"
    try:
        document: dict[str, Any] = yaml.safe_load(path.read_text())
    except OSError as e:
        raise DemoError(f"cannot read {path} (run the demo from a checkout of the repository): {e}") from e
    spec = document["spec"]
    original = copy.deepcopy(spec)
    (topic,) = spec["topics"]
    changes = [f"spec.kafka.bootstrapServers: {original['kafka']['bootstrapServers']} -> {bootstrap}"]
    spec["kafka"]["bootstrapServers"] = bootstrap
    static = original["lagSource"].get("static", {}).get("lags", {})
    partitions = len(static[topic])
    if original["lagSource"]["type"] == "static":
        spec["lagSource"] = {"type": "kafka"}
        changes.append(
            "spec.lagSource: static -> kafka (the example's static lags stand in for a cluster; "
            "here the operator reads the group's real lag from the broker)"
        )
    if "rebalance" in spec:
        spec["rebalance"]["cooldownSeconds"] = DEMO_COOLDOWN_S
        changes.append(
            f"spec.rebalance.cooldownSeconds: {original['rebalance'].get('cooldownSeconds', 30)} -> "
            f"{DEMO_COOLDOWN_S} (the demo's burst is short: replicas would absorb it within the "
            "default cooldown, and nothing would be worth a replan)"
        )
    if suffix:
        spec["topics"] = [topic + suffix]
        spec["groupId"] = original["groupId"] + suffix
        priorities = spec["consumers"].get("priorities") or {}
        spec["consumers"]["priorities"] = {
            key.replace(original["groupId"], spec["groupId"], 1): value for key, value in priorities.items()
        }
        changes.append(f"topic {topic} -> {topic + suffix}, group {original['groupId']} -> {spec['groupId']}")
    return PolicyInfo(
        name=document["metadata"]["name"],
        group=spec["groupId"],
        topic=spec["topics"][0],
        partitions=partitions,
        replicas=int(spec["consumers"]["replicas"]),
        document=document,
        changes=tuple(changes),
    )


def static_lags(example: str) -> list[int]:
    document = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    ((_, lags),) = document["spec"]["lagSource"]["static"]["lags"].items()
    return [int(lag) for lag in lags]
