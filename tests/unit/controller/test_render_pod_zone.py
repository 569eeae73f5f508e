"""A pod's zone reaches Kafka: with `zones`, each pod's librdkafka properties carry `client.rack` =
the zone its node affinity requires, and the consumer's Kafka configuration (both deliveries)
gets it from the pod's environment unchanged."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from groupops.consumer.replica import kafka_config
from groupops.consumer.settings import RuntimeSettings
from groupops.controller import render_pods
from groupops.controller.render_common import PolicyRef
from groupops.controller.settings import ConsumerSettings
from groupops.controller.spec import parse_policy

POLICY = PolicyRef(namespace="team-a", name="orders", uid="uid-1", generation=3)
SPEC: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092", "properties": {"fetch.min.bytes": "1"}},
    "groupId": "orders-processor",
    "topics": ["orders"],
    "strategy": {"type": "cooperative-sticky", "rackAware": True},
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3]}}},
    "consumers": {"replicas": 3, "zones": ["eu-1a", "eu-1b"], "delivery": "native"},
}


def spec_with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = spec
        for key in parents:
            target = target[key]
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return spec


def pod(spec: dict[str, Any], ordinal: int, zone: str | None) -> dict[str, Any]:
    return render_pods.render_pod(
        POLICY,
        parse_policy(spec),
        render_pods.Slot(ordinal=ordinal, identity=f"orders-processor-{ordinal}", zone=zone),
        settings=ConsumerSettings(),
        lease_seconds=10,
    )


def env_of(rendered: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet resolves it (the namespace fieldRef included)."""
    resolved: dict[str, str] = {}
    for item in rendered["spec"]["containers"][0]["env"]:
        if "value" in item:
            resolved[item["name"]] = item["value"]
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace":
            resolved[item["name"]] = POLICY.namespace
    return resolved


def properties_of(rendered: dict[str, Any]) -> dict[str, str]:
    parsed: dict[str, str] = json.loads(env_of(rendered)["GROUPOPS_KAFKA_PROPERTIES"])
    return parsed


@pytest.mark.parametrize(
    ("ordinal", "zone"),
    [
        pytest.param(0, "eu-1a", id="replica 0 in the first zone"),
        pytest.param(1, "eu-1b", id="replica 1 in the second zone"),
        pytest.param(2, "eu-1a", id="replica 2 wraps around"),
    ],
)
def test_the_pods_zone_is_its_client_rack_and_its_node_affinity(ordinal: int, zone: str) -> None:
    rendered = pod(SPEC, ordinal, zone)
    assert properties_of(rendered) == {"client.rack": zone, "fetch.min.bytes": "1"}
    terms = rendered["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": render_pods.ZONE_LABEL, "operator": "In", "values": [zone]}]
    assert rendered["metadata"]["labels"]["groupops.dev/zone"] == zone, "how a zone change is seen"


def test_the_zone_overrides_a_client_rack_the_policy_sets() -> None:
    own_rack = spec_with(kafka__properties={"client.rack": "somewhere-else"})
    assert properties_of(pod(own_rack, 1, "eu-1b"))["client.rack"] == "eu-1b"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(
            spec_with(consumers__zones=None, strategy__rackAware=False), id="no zones: no client.rack"
        ),
        pytest.param(
            spec_with(consumers__zones=None, kafka__properties={"client.rack": "r9"}),
            id="no zones: the policy's client.rack as it is",
        ),
    ],
)
def test_without_zones_the_properties_are_the_policys(spec: dict[str, Any]) -> None:
    rendered = pod(spec, 0, None)
    assert properties_of(rendered) == dict(spec["kafka"]["properties"])
    assert "affinity" not in rendered["spec"]
    assert "groupops.dev/zone" not in rendered["metadata"]["labels"]


def test_pods_in_different_zones_share_one_template_hash() -> None:
    label = "groupops.dev/template-hash"
    hashes = {pod(SPEC, i, zone)["metadata"]["labels"][label] for i, zone in enumerate(["eu-1a", "eu-1b"])}
    assert len(hashes) == 1, "a zone is the slot's, not the template's: it must not roll the pods"
    other_properties = spec_with(kafka__properties={"fetch.min.bytes": "2"})
    assert pod(other_properties, 0, "eu-1a")["metadata"]["labels"][label] not in hashes


@pytest.mark.parametrize(
    "delivery",
    [pytest.param("native", id="native: the leader's assignor sees it"), pytest.param("plan", id="plan")],
)
def test_the_consumers_kafka_configuration_carries_the_pods_zone(delivery: str) -> None:
    rendered = pod(spec_with(consumers__delivery=delivery), 1, "eu-1b")
    settings = RuntimeSettings.from_env(env_of(rendered))
    config = kafka_config(settings)
    assert config["client.rack"] == "eu-1b"
    assert config["group.instance.id"] == "orders-processor-1"
    assert config["fetch.min.bytes"] == "1"
