"""The CRD teaches its API: every field described, printer columns as documented, CEL rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from groupops.assign import STRATEGY_NAMES
from groupops.lag.registry import SOURCE_TYPES

CRD = yaml.safe_load((Path(__file__).parents[3] / "crds" / "consumergrouppolicy.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def undocumented(node: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, child in (node.get("properties") or {}).items():
        where = f"{path}.{name}"
        if name != "metadata" and not child.get("description"):
            missing.append(where)
        missing += undocumented(child, where)
        if isinstance(child.get("items"), dict):
            missing += undocumented(child["items"], f"{where}[]")
    return missing


def test_every_field_has_a_description() -> None:
    assert undocumented(SCHEMA, "") == []


def test_names_and_subresources() -> None:
    assert CRD["spec"]["names"]["shortNames"] == ["cgp"]
    assert CRD["spec"]["scope"] == "Namespaced"
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    shown = [c["name"] for c in VERSION["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Strategy", "Replicas", "Ready", "Total Lag", "Imbalance", "Epoch", "Proposal", "Age"]


def test_strategy_enum_matches_the_engine() -> None:
    enum = SCHEMA["properties"]["spec"]["properties"]["strategy"]["properties"]["type"]["enum"]
    assert sorted(enum) == sorted(STRATEGY_NAMES)


def test_lag_source_enum_matches_the_registry() -> None:
    enum = SCHEMA["properties"]["spec"]["properties"]["lagSource"]["properties"]["type"]["enum"]
    assert sorted(enum) == sorted(SOURCE_TYPES)


def test_cross_field_rules_are_cel_validations() -> None:
    rules = " ".join(r["rule"] for r in SCHEMA["properties"]["spec"]["x-kubernetes-validations"])
    assert "native" in rules
    assert "priorities" in rules
    consumers = SCHEMA["properties"]["spec"]["properties"]["consumers"]
    assert (
        consumers["properties"]["autoscale"]["x-kubernetes-validations"][0]["rule"]
        == "!has(self.min) || self.min <= self.max"
    )
