"""Bad policies: what the schema can judge, the API server rejects with a message naming the
field; what only the operator can judge becomes Ready=False (or Degraded) with a reason and an
Event. The operator keeps running and keeps reconciling good policies throughout."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.operator_support import (
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

GOOD: dict[str, Any] = {
    "apiVersion": "groupops.dev/v1alpha1",
    "kind": "ConsumerGroupPolicy",
    "metadata": {"name": "good"},
    "spec": {
        "kafka": {"bootstrapServers": "127.0.0.1:9092"},
        "groupId": "orders",
        "topics": ["orders"],
        "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3]}}},
        "consumers": {"replicas": 2},
    },
}


def variant(name: str, **changes: Any) -> dict[str, Any]:
    """GOOD named `name`, with its own group id `name` (two policies on one group: the later one
    is a Conflict, design §6.4), and `changes` applied: dotted paths under spec; a value of DELETE
    removes the key."""
    document = copy.deepcopy(GOOD)
    document["metadata"]["name"] = name
    document["spec"]["groupId"] = name
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = document["spec"]
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf)
        else:
            node[leaf] = value
    return document


DELETE = object()

REJECTED = [
    pytest.param(variant("no-group", groupId=DELETE), "spec.groupId", id="missing-groupId"),
    pytest.param(variant("no-bootstrap", kafka={}), "spec.kafka.bootstrapServers", id="missing-bootstrap"),
    pytest.param(variant("no-topics", topics=[]), "spec.topics", id="empty-topics"),
    pytest.param(variant("bad-topic", topics=["bad topic!"]), "spec.topics[0]", id="topic-pattern"),
    pytest.param(variant("bad-group", groupId="has space"), "spec.groupId", id="group-pattern"),
    pytest.param(
        variant("bad-strategy", strategy={"type": "random"}), "spec.strategy.type", id="strategy-enum"
    ),
    pytest.param(
        variant("bad-reset", strategy={"autoOffsetReset": "none"}),
        "spec.strategy.autoOffsetReset",
        id="offset-reset-enum",
    ),
    pytest.param(
        variant("neg-replicas", consumers={"replicas": -1}), "spec.consumers.replicas", id="replicas-min"
    ),
    pytest.param(
        variant("huge-replicas", consumers={"replicas": 5000}), "spec.consumers.replicas", id="replicas-max"
    ),
    pytest.param(
        variant("bad-threshold", rebalance={"imbalanceThreshold": 0.5}),
        "spec.rebalance.imbalanceThreshold",
        id="threshold-min",
    ),
    pytest.param(
        variant("bad-interval", rebalance={"interval": "soon"}),
        "spec.rebalance.interval",
        id="interval-pattern",
    ),
    pytest.param(
        variant("bad-approval", rebalance={"approval": "sometimes"}),
        "spec.rebalance.approval",
        id="approval-enum",
    ),
    pytest.param(
        variant("bad-moves", rebalance={"maxMovesPerRebalance": 0}),
        "spec.rebalance.maxMovesPerRebalance",
        id="moves-min",
    ),
    pytest.param(
        variant("native-lag", consumers={"replicas": 2, "delivery": "native"}),
        "spec.consumers.delivery",
        id="cel-native-needs-kafka-strategy",
    ),
    pytest.param(
        variant("both-sizes", consumers={"replicas": 2, "autoscale": {"max": 3, "targetLagPerReplica": 10}}),
        "spec.consumers.autoscale",
        id="cel-replicas-xor-autoscale",
    ),
    pytest.param(
        variant("min-above-max", consumers={"autoscale": {"min": 5, "max": 3, "targetLagPerReplica": 10}}),
        "spec.consumers.autoscale.min",
        id="cel-autoscale-min-le-max",
    ),
    pytest.param(
        variant("static-kafka", lagSource={"type": "kafka", "static": {"lags": {"orders": [1]}}}),
        "spec.lagSource.static",
        id="cel-static-lags-only-with-static",
    ),
    pytest.param(
        variant("prom-no-url", lagSource={"type": "prometheus"}),
        "spec.lagSource.prometheus",
        id="cel-prometheus-needs-settings",
    ),
    pytest.param(
        variant("foreign-priority", consumers={"replicas": 2, "priorities": {"payments-0": 5}}),
        "spec.consumers.priorities",
        id="cel-priorities-name-identities",
    ),
    pytest.param(
        variant("static-other-topic", lagSource={"type": "static", "static": {"lags": {"refunds": [1]}}}),
        "spec.lagSource.static.lags",
        id="cel-static-topics-in-spec",
    ),
    pytest.param(
        variant("neg-lag", lagSource={"type": "static", "static": {"lags": {"orders": [1, -1]}}}),
        "spec.lagSource.static.lags.orders[1]",
        id="lag-min",
    ),
    pytest.param(variant("typo", strategy={"tpye": "lag"}), "spec.strategy.tpye", id="unknown-field-strict"),
    pytest.param(
        variant("zones-no-rack", consumers={"replicas": 2, "zones": ["a"]}),
        "spec.consumers.zones",
        id="cel-zones-need-rack-aware",
    ),
    pytest.param(
        variant("both-kafka", kafka={"bootstrapServers": "127.0.0.1:9092", "clusterRef": {"name": "prod"}}),
        "spec.kafka.bootstrapServers",
        id="cel-brokers-xor-cluster",
    ),
    pytest.param(
        variant("foreign-capacity", consumers={"replicas": 2, "capacity": {"byIdentity": {"payments-0": 2}}}),
        "spec.consumers.capacity.byIdentity",
        id="cel-capacity-names-identities",
    ),
    pytest.param(
        variant(
            "capacity-unlisted-zone",
            strategy={"rackAware": True},
            consumers={"replicas": 2, "zones": ["a"], "capacity": {"byZone": {"b": 2}}},
        ),
        "spec.consumers.capacity.byZone",
        id="cel-capacity-zones-listed",
    ),
    pytest.param(
        variant("zero-capacity", consumers={"replicas": 2, "capacity": {"default": 0}}),
        "spec.consumers.capacity.default",
        id="capacity-positive",
    ),
    pytest.param(
        variant("x" * 51),
        "metadata.name",
        id="cel-name-length",
    ),
]


@pytest.mark.parametrize(("manifest", "field"), REJECTED)
def test_api_server_rejects_naming_the_field(
    kubectl: Kubectl, namespace: str, manifest: dict[str, Any], field: str
) -> None:
    result = kubectl.apply(manifest, namespace, check=False)
    assert result.returncode != 0, f"accepted: {manifest}"
    assert field in result.stderr, result.stderr
    assert kubectl.get_json("cgp", manifest["metadata"]["name"], namespace) is None


def reported(kubectl: Kubectl, namespace: str, name: str, kind: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        policy = cgp(kubectl, namespace, name)
        return policy if condition(policy, kind).get("reason") == reason else None

    policy: dict[str, Any] = wait_for(f"{name}: {kind} reason {reason}", probe, timeout=60)
    return policy


def events_of(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    events = kubectl.get_json("events", None, namespace)
    return [e["reason"] for e in events["items"] if e["involvedObject"]["name"] == name]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({}, "spec.bootstrapServers", id="missing-brokers"),
        pytest.param(
            {"bootstrapServers": "k:9092", "disruptionBudget": {"maxHandoffsInFlight": 0}},
            "spec.disruptionBudget.maxHandoffsInFlight",
            id="budget-min",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "allowedNamespaces": ["Team_A"]},
            "spec.allowedNamespaces[0]",
            id="namespace-pattern",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "operatorAuthSecretRef": {"name": "s"}},
            "spec.operatorAuthSecretRef.namespace",
            id="secret-needs-namespace",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "policyDefaults": {"consumers": {"maxPollIntervalSeconds": 2}}},
            "spec.policyDefaults.consumers.maxPollIntervalSeconds",
            id="policy-default-out-of-bounds",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "policyDefaults": {"lagSource": {"type": "burrow"}}},
            "spec.policyDefaults.lagSource.burrow",
            id="lag-source-default-without-its-settings",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "policyDefaults": {"lagSource": {"type": "static"}}},
            "spec.policyDefaults.lagSource.type",
            id="no-static-lag-source-default",
        ),
    ],
)
def test_api_server_rejects_a_bad_cluster_naming_the_field(
    kubectl: Kubectl, spec: dict[str, Any], field: str
) -> None:
    manifest = {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupCluster",
        "metadata": {"name": "refused-cluster"},
        "spec": spec,
    }
    result = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(manifest), check=False)
    assert result.returncode != 0, f"accepted: {manifest}"
    assert field in result.stderr, result.stderr
    assert kubectl.get_json("cgc", "refused-cluster", "default") is None


@pytest.mark.parametrize(
    ("manifest", "kind", "reason", "in_message"),
    [
        pytest.param(
            variant("unknown-identity", consumers={"replicas": 2, "priorities": {"unknown-identity-7": 5}}),
            "Ready",
            "InvalidSpec",
            "spec.consumers.priorities.unknown-identity-7",
            id="priority-for-unknown-identity",
        ),
        pytest.param(
            variant("missing-topic", topics=["orders", "refunds"]),
            "Ready",
            "TopicNotFound",
            "refunds",
            id="topic-not-found",
        ),
        pytest.param(
            variant(
                "missing-secret",
                kafka={"bootstrapServers": "127.0.0.1:9092", "authSecretRef": {"name": "nope"}},
            ),
            "Ready",
            "AuthSecretMissing",
            "nope",
            id="auth-secret-missing",
        ),
        pytest.param(
            variant("no-cluster", kafka={"clusterRef": {"name": "no-such-cluster"}}),
            "Ready",
            "ClusterNotFound",
            "no-such-cluster",
            id="cluster-not-found",
        ),
        pytest.param(
            variant(
                "lag-down",
                lagSource={
                    "type": "prometheus",
                    "prometheus": {"url": "http://127.0.0.1:9", "timeoutSeconds": 1},
                },
            ),
            "Ready",
            "LagSourceUnavailable",
            "127.0.0.1:9",
            id="lag-source-unreachable",
        ),
        pytest.param(
            variant(
                "bad-template",
                consumers={
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "consumer", "image": "x", "resources": {"requests": {"cpu": "lots"}}}
                            ]
                        }
                    },
                },
            ),
            "Degraded",
            "ObjectRejected",
            "Pod",
            id="pod-template-rejected",
        ),
    ],
)
def test_operator_reports_what_only_it_can_judge(
    kubectl: Kubectl,
    namespace: str,
    module_operator: OperatorProcess,
    manifest: dict[str, Any],
    kind: str,
    reason: str,
    in_message: str,
) -> None:
    kubectl.apply(manifest, namespace)
    name = manifest["metadata"]["name"]
    policy = reported(kubectl, namespace, name, kind, reason)
    assert in_message in condition(policy, kind)["message"]
    wait_for(
        f"an Event {reason} on {name}", lambda: reason in events_of(kubectl, namespace, name), timeout=30
    )
    assert module_operator.alive()


def test_a_fixed_policy_recovers_and_the_operator_never_stopped(
    kubectl: Kubectl, namespace: str, module_operator: OperatorProcess, tmp_path: Path
) -> None:
    broken = variant("fixable", consumers={"replicas": 2, "priorities": {"fixable-5": 1}})
    kubectl.apply(broken, namespace)
    reported(kubectl, namespace, "fixable", "Ready", "InvalidSpec")
    kubectl.apply(variant("fixable", consumers={"replicas": 2, "priorities": {"fixable-1": 1}}), namespace)
    policy = wait_for("fixable to recover", settled(kubectl, namespace, "fixable"), timeout=60)
    assert condition(policy, "Ready")["reason"] == "Reconciled"
    kubectl.apply(variant("good"), namespace)
    wait_for("a good policy beside the bad ones", settled(kubectl, namespace, "good"), timeout=60)
    assert module_operator.alive() and module_operator.starts == 1
