"""Every example policy, applied with kubectl to the real API server, runs as specified: the
operator creates the consumer ServiceAccount, Role, RoleBinding, plan ConfigMap, Leases and one
pod per identity, and status.members equals `groupops assign` on the same input."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator_support import (
    EXAMPLES,
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    example,
    groupops_assign,
    plan_of,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

NAMES = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))


@pytest.fixture(scope="module")
def applied(kubectl: Kubectl, namespace: str, module_operator: OperatorProcess) -> dict[str, dict[str, Any]]:
    """Apply every example at once, then wait for each to settle on its first plan."""
    documents = {name: example(name) for name in NAMES}
    for document in documents.values():
        kubectl.apply(document, namespace)
    for name, document in documents.items():
        policy = document["metadata"]["name"]
        wait_for(f"{name} to publish its first plan", settled(kubectl, namespace, policy), timeout=90)
    assert module_operator.alive()
    return documents


def same_input(spec: dict[str, Any]) -> dict[str, Any]:
    """The `groupops assign` document the first plan of `spec` is computed from: one static member
    per identity, subscribed to every topic, nothing owned yet."""
    replicas = spec["consumers"]["replicas"]
    priorities = spec["consumers"].get("priorities", {})
    capacity = spec["consumers"].get("capacity", {})
    lags = spec["lagSource"]["static"]["lags"]
    members = []
    for ordinal in range(replicas):
        identity = f"{spec['groupId']}-{ordinal}"
        members.append(
            {
                "member_id": identity,
                "group_instance_id": identity,
                "topics": spec["topics"],
                "priority": priorities.get(identity, -(ordinal + 1)),
                "capacity": capacity.get("byIdentity", {}).get(identity, capacity.get("default", 1)),
            }
        )
    options: dict[str, Any] = {"failback": spec.get("strategy", {}).get("failback", True)}
    moves = spec.get("rebalance", {}).get("maxMovesPerRebalance")
    if moves is not None:
        options["max_moves"] = moves
    return {
        "strategy": spec.get("strategy", {}).get("type", "lag"),
        "topics": {topic: len(lags[topic]) for topic in spec["topics"]},
        "members": members,
        "lags": lags,
        "options": options,
    }


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_as_specified(
    kubectl: Kubectl, namespace: str, applied: dict[str, dict[str, Any]], name: str
) -> None:
    document = applied[name]
    policy_name = document["metadata"]["name"]
    spec = document["spec"]
    replicas = spec["consumers"]["replicas"]
    selector = f"groupops.dev/policy={policy_name}"
    policy = cgp(kubectl, namespace, policy_name)
    status = policy["status"]

    for ordinal in range(replicas):  # each replica its own account, which may write its own Lease only
        account_name = f"{policy_name}-consumer-{ordinal}"
        assert kubectl.get_json("serviceaccount", account_name, namespace) is not None
        role = kubectl.get_json("role", account_name, namespace)
        assert role["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [f"{policy_name}-plan"],
                "verbs": ["get", "watch"],
            },
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [f"{policy_name}-{spec['groupId']}-{ordinal}"],
                "verbs": ["get", "update"],
            },
        ]
        binding = kubectl.get_json("rolebinding", account_name, namespace)
        assert binding["subjects"][0]["name"] == account_name

    pods = kubectl.items("pods", namespace, selector)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{policy_name}-{i}" for i in range(replicas)]
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["uid"] == policy["metadata"]["uid"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        ordinal = pod["metadata"]["labels"]["groupops.dev/ordinal"]
        assert env["GROUPOPS_IDENTITY"] == f"{spec['groupId']}-{ordinal}"
        assert env["GROUPOPS_POLICY"] == policy_name
        assert env["GROUPOPS_KAFKA_BOOTSTRAP_SERVERS"] == spec["kafka"]["bootstrapServers"]
        assert pod["spec"]["serviceAccountName"] == f"{policy_name}-consumer-{ordinal}"
    assert len(kubectl.items("leases", namespace, selector)) == replicas

    plan = plan_of(kubectl, namespace, policy_name)
    assert int(plan["epoch"]) == status["epoch"] >= 1
    assert sorted(k for k in plan if k not in ("epoch", "strategy")) == [
        f"{spec['groupId']}-{i}" for i in range(replicas)
    ]

    expected = groupops_assign(same_input(spec))["assignment"]
    shown = {member["instanceId"]: member["partitions"] for member in status["members"]}
    assert shown == {identity: [f"{t}-{p}" for t, p in tps] for identity, tps in expected.items()}
    capacity = spec["consumers"].get("capacity", {})
    assert {member["instanceId"]: member["capacity"] for member in status["members"]} == {
        identity: capacity.get("byIdentity", {}).get(identity, capacity.get("default", 1))
        for identity in expected
    }
    assert status["totalLag"] == sum(sum(v) for v in spec["lagSource"]["static"]["lags"].values())
    applied = condition(policy, "PlanApplied")
    if spec["consumers"].get("delivery") == "native":
        # Kafka assigns; the example's brokers are not reachable from this test, so the operator
        # says it could not compare (and why), without failing the policy.
        assert (applied["status"], applied["reason"]) == ("False", "BrokerNotCompared")
        assert applied["message"].startswith("cannot describe the group")
        assert status["brokerAssignment"] == {"groupState": "Unknown", "differing": []}
    else:
        assert applied["status"] == "True"
        assert "brokerAssignment" not in status
    assert condition(policy, "Degraded")["status"] == "False"


def test_kubectl_get_shows_the_columns(
    kubectl: Kubectl, namespace: str, applied: dict[str, dict[str, Any]]
) -> None:
    table = kubectl.run("get", "cgp", "-n", namespace).stdout
    header = table.splitlines()[0].split()
    assert header == [
        "NAME",
        "STRATEGY",
        "REPLICAS",
        "READY",
        "TOTAL",
        "LAG",
        "IMBALANCE",
        "EPOCH",
        "PROPOSAL",
        "AGE",
    ]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    failover = rows["ledger-failover"]
    assert failover[1:4] == ["failover", "3", "0"]
    assert failover[4] == "100"
    wide = kubectl.run("get", "cgp", "-n", namespace, "-o", "wide").stdout
    assert "GROUP" in wide.splitlines()[0] and "ledger" in wide
    described = kubectl.run("describe", "cgp", "ledger-failover", "-n", namespace).stdout
    assert "Rebalanced" in described and "ledger-1" in described
    print(f"\n$ kubectl get cgp -o wide\n{wide}\n$ kubectl describe cgp ledger-failover\n{described}")
    out = Path(__file__).resolve().parents[2] / "test-output"
    out.mkdir(exist_ok=True)
    (out / "failover-example.txt").write_text(
        f"$ kubectl get cgp -o wide\n{wide}\n$ kubectl describe cgp ledger-failover\n{described}"
    )


def test_failover_keeps_standbys_with_empty_sets_in_priority_order(
    kubectl: Kubectl, namespace: str, applied: dict[str, dict[str, Any]]
) -> None:
    status = cgp(kubectl, namespace, "ledger-failover")["status"]
    by_priority = sorted(status["members"], key=lambda m: -m["priority"])
    assert [m["instanceId"] for m in by_priority] == ["ledger-1", "ledger-2", "ledger-0"]
    assert by_priority[0]["partitions"] == ["ledger-0", "ledger-1", "ledger-2", "ledger-3"]
    assert [m["partitions"] for m in by_priority[1:]] == [[], []]
    plan = plan_of(kubectl, namespace, "ledger-failover")
    assert plan["ledger-0"] == "[]" and plan["ledger-2"] == "[]"


def test_nothing_changes_while_nothing_changes(
    kubectl: Kubectl, namespace: str, applied: dict[str, dict[str, Any]]
) -> None:
    """Level-based, but quiet: with the same lag and members, ticks publish nothing and write no
    status (resourceVersion stays)."""
    before = cgp(kubectl, namespace, "clicks-roundrobin")
    time.sleep(4)  # four operator ticks
    after = cgp(kubectl, namespace, "clicks-roundrobin")
    assert after["status"]["epoch"] == before["status"]["epoch"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
