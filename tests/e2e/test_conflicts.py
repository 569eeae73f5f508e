"""Two policies on one group of one Kafka cluster, on the real API server and operator: the later
one says Stalled=True Conflict naming the first and has no pods, Leases or plan, while the first
runs on; deleting the first wakes the later one, which plans and creates its pods. A policy that
names a ConsumerGroupCluster and one that writes that cluster's servers inline are one cluster;
the one naming it takes the cluster's policyDefaults.

The operator ticks every 60 s here, longer than the test waits: the later policy runs after the
deletion because the deletion woke it (docs/design.md §6.4), not because its tick came."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator_support import (
    STARTUP_TIMEOUT_S,
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    plan_of,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

WOKEN_WITHIN_S = 20.0
"""How long the later policy may take to run after the first is deleted: well under the tick."""


def policy(
    name: str, servers: str | None = None, *, cluster: str | None = None, group: str = "shared-group"
) -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": servers} if cluster is None else {"clusterRef": {"name": cluster}},
            "groupId": group,
            "topics": ["t"],
            "strategy": {"type": "lag"},
            "lagSource": {"type": "static", "static": {"lags": {"t": [40, 30, 20, 10]}}},
            "consumers": {"replicas": 2},
        },
    }


@pytest.fixture
def slow_operator(kube_config: str, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator with a 60 s tick: only a wake-up runs a policy between its first run and the
    end of the test."""
    operator = OperatorProcess(
        kubeconfig=kube_config, namespace=namespace, log_path=tmp_path / "operator.log", tick="60"
    )
    operator.start()
    operator.wait_started(timeout=STARTUP_TIMEOUT_S)
    try:
        yield operator
    finally:
        alive = operator.alive()
        operator.stop()
        print(f"--- operator log ({namespace}) ---\n{operator.log_tail(60)}")
        assert alive, "the operator died during the test"


def owned(kubectl: Kubectl, namespace: str, kind: str, name: str) -> list[str]:
    objects = kubectl.items(kind, namespace, f"groupops.dev/policy={name}")
    return sorted(o["metadata"]["name"] for o in objects)


def test_the_later_policy_stands_down_until_the_first_is_deleted(
    kubectl: Kubectl, namespace: str, slow_operator: OperatorProcess
) -> None:
    kubectl.apply(policy("alpha", "127.0.0.1:9092"), namespace)
    wait_for("alpha to run", settled(kubectl, namespace, "alpha"), timeout=30)
    alpha_pods = owned(kubectl, namespace, "pods", "alpha")
    assert alpha_pods == ["alpha-0", "alpha-1"]

    # The same cluster written another way: one server in common once normalised.
    kubectl.apply(policy("beta", "127.0.0.1,localhost:9093"), namespace)

    def stalled() -> dict[str, Any] | None:
        beta = cgp(kubectl, namespace, "beta")
        return beta if condition(beta, "Stalled").get("reason") == "Conflict" else None

    beta = wait_for("beta to stand down", stalled, timeout=30)
    ready, stalled_condition = condition(beta, "Ready"), condition(beta, "Stalled")
    assert (ready["status"], ready["reason"]) == ("False", "Conflict")
    assert stalled_condition["status"] == "True"
    assert f"policy {namespace}/alpha claims group shared-group" in stalled_condition["message"]
    assert "127.0.0.1:9092" in stalled_condition["message"], "the server both name"
    for kind in ("pods", "leases", "configmaps"):
        assert owned(kubectl, namespace, kind, "beta") == [], f"beta created {kind}"
    assert kubectl.get_json("configmap", "beta-plan", namespace) is None
    alpha = cgp(kubectl, namespace, "alpha")
    assert condition(alpha, "Ready")["reason"] == "Reconciled", "the first is unaffected"
    assert owned(kubectl, namespace, "pods", "alpha") == alpha_pods

    kubectl.run("delete", "cgp", "alpha", "-n", namespace, "--wait=false")

    def running() -> dict[str, Any] | None:
        found = settled(kubectl, namespace, "beta")()
        return found if found is not None and owned(kubectl, namespace, "pods", "beta") else None

    beta = wait_for("beta to run once alpha is gone", running, timeout=WOKEN_WITHIN_S)
    assert condition(beta, "Stalled")["status"] == "False"
    assert owned(kubectl, namespace, "pods", "beta") == ["beta-0", "beta-1"]
    plan = plan_of(kubectl, namespace, "beta")
    assert sorted(k for k in plan if k not in ("epoch", "strategy")) == ["shared-group-0", "shared-group-1"]


def test_a_policy_naming_a_cluster_and_one_writing_its_servers_inline_are_one_cluster(
    kubectl: Kubectl, namespace: str, slow_operator: OperatorProcess
) -> None:
    cluster = f"{namespace}-kafka"
    kubectl.apply(
        {
            "apiVersion": "groupops.dev/v1alpha1",
            "kind": "ConsumerGroupCluster",
            "metadata": {"name": cluster},
            "spec": {
                "bootstrapServers": "127.0.0.1:9092,localhost:9092",
                "policyDefaults": {"consumers": {"maxPollIntervalSeconds": 45}},
            },
        },
        namespace,
    )
    try:
        kubectl.apply(policy("by-ref", cluster=cluster, group="by-cluster"), namespace)
        wait_for("by-ref to run", settled(kubectl, namespace, "by-ref"), timeout=30)
        stored = cgp(kubectl, namespace, "by-ref")["spec"]
        assert "maxPollIntervalSeconds" not in stored["consumers"], "no schema default hides 'unset'"
        pod = kubectl.get_json("pod", "by-ref-0", namespace)
        assert pod is not None
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "45", "the cluster's policyDefaults"
        kubectl.apply(policy("inline", "LOCALHOST:9092", group="by-cluster"), namespace)

        def stalled() -> dict[str, Any] | None:
            found = cgp(kubectl, namespace, "inline")
            return found if condition(found, "Stalled").get("reason") == "Conflict" else None

        inline = wait_for("the inline policy to stand down", stalled, timeout=30)
        message = condition(inline, "Stalled")["message"]
        assert f"policy {namespace}/by-ref claims group by-cluster" in message
        assert "localhost:9092" in message, "the server both reach"
        assert owned(kubectl, namespace, "pods", "inline") == []
        assert condition(cgp(kubectl, namespace, "by-ref"), "Ready")["reason"] == "Reconciled"
    finally:
        kubectl.run("delete", "cgc", cluster, "--wait=false")
