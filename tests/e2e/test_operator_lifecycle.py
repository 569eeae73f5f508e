"""A policy through its life: scale 3 -> 5 -> 2, a template change, manual approval, dry run and
deletion. After each step the right objects exist, and the plan's epoch never goes back."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytest

from tests.e2e.operator_support import (
    GROUPOPS,
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    create_namespace,
    plan_of,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]


def policy(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name},
        "spec": {
            "kafka": {"bootstrapServers": "127.0.0.1:9092"},
            "groupId": f"{name}-g",
            "topics": ["t"],
            "strategy": {"type": "lag"},
            "lagSource": {"type": "static", "static": {"lags": {"t": [50, 40, 30, 20, 10, 10, 5, 5, 1, 1]}}},
            "consumers": {"replicas": replicas},
            **spec,
        },
    }


@pytest.fixture
def namespace(kubectl: Kubectl, unique_name: Any) -> str:
    name: str = unique_name("life")
    create_namespace(kubectl, name)
    return name


class EpochWatch:
    """Every epoch seen, in order; asserts it never decreases."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def see(self, epoch: int) -> int:
        assert not self.seen or epoch >= self.seen[-1], f"epoch went back: {self.seen} then {epoch}"
        self.seen.append(epoch)
        return epoch


def pods(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    return kubectl.items("pods", namespace, f"groupops.dev/policy={name}")


def pod_names(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods(kubectl, namespace, name))


def converged(
    kubectl: Kubectl, namespace: str, name: str, replicas: int, epochs: EpochWatch
) -> dict[str, Any]:
    """Wait until pods, plan and status all describe `replicas` identities with every partition
    placed; return the policy."""
    expected_pods = [f"{name}-{i}" for i in range(replicas)]
    expected_ids = [f"{name}-g-{i}" for i in range(replicas)]

    def probe() -> dict[str, Any] | None:
        current = settled(kubectl, namespace, name)()
        if current is None:
            return None
        epochs.see(current["status"]["epoch"])
        plan = plan_of(kubectl, namespace, name)
        identities = sorted(k for k in plan if k not in ("epoch", "strategy"))
        placed = sum(len(m["partitions"]) for m in current["status"]["members"])
        ok = (
            pod_names(kubectl, namespace, name) == expected_pods
            and identities == expected_ids
            and placed == 10
        )
        return current if ok and current["status"]["replicas"] == replicas else None

    result: dict[str, Any] = wait_for(f"{name} to converge on {replicas} replicas", probe, timeout=90)
    return result


def test_scale_3_to_5_to_2(kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    epochs = EpochWatch()
    kubectl.apply(policy("scale", 3), namespace)
    converged(kubectl, namespace, "scale", 3, epochs)
    kubectl.apply(policy("scale", 5), namespace)
    five = converged(kubectl, namespace, "scale", 5, epochs)
    assert all(m["partitions"] for m in five["status"]["members"]), "every new identity gets work"
    kubectl.apply(policy("scale", 2), namespace)
    two = converged(kubectl, namespace, "scale", 2, epochs)
    assert [m["instanceId"] for m in two["status"]["members"]] == ["scale-g-0", "scale-g-1"]
    leases = kubectl.items("leases", namespace, "groupops.dev/policy=scale")
    assert len(leases) == 2, "the Leases of removed identities go with their pods"
    accounts = kubectl.items("serviceaccounts", namespace, "groupops.dev/policy=scale")
    assert sorted(a["metadata"]["name"] for a in accounts) == ["scale-consumer-0", "scale-consumer-1"], (
        "the accounts of removed identities go with their pods"
    )
    assert len(set(epochs.seen)) >= 3


def test_template_change_replaces_pods_one_at_a_time(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    epochs = EpochWatch()
    kubectl.apply(policy("roll", 3), namespace)
    converged(kubectl, namespace, "roll", 3, epochs)
    old = {p["metadata"]["labels"]["groupops.dev/template-hash"] for p in pods(kubectl, namespace, "roll")}
    template = {
        "metadata": {"labels": {"version": "2"}},
        "spec": {"containers": [{"name": "consumer", "image": "c:2"}]},
    }
    kubectl.apply(policy("roll", 3, consumers={"replicas": 3, "template": template}), namespace)
    most_missing = 0

    def rolled() -> bool:
        nonlocal most_missing
        current = pods(kubectl, namespace, "roll")
        most_missing = max(most_missing, 3 - len(current))
        hashes = {p["metadata"]["labels"]["groupops.dev/template-hash"] for p in current}
        return len(current) == 3 and not hashes & old

    wait_for("every pod to run the new template", rolled, timeout=120, interval=0.2)
    assert most_missing <= 1, "never more than one pod replaced at a time"
    final = converged(kubectl, namespace, "roll", 3, epochs)
    assert {p["spec"]["containers"][0]["image"] for p in pods(kubectl, namespace, "roll")} == {"c:2"}
    assert final["status"]["epoch"] > epochs.seen[0], "each replacement handed partitions away first"


def test_manual_approval(kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    epochs = EpochWatch()
    manual = {"approval": "manual"}
    kubectl.apply(policy("approve", 2, rebalance=manual), namespace)
    first = converged(kubectl, namespace, "approve", 2, epochs)
    epoch = first["status"]["epoch"]
    kubectl.apply(policy("approve", 3, rebalance=manual), namespace)

    def proposed() -> dict[str, Any] | None:
        current = cgp(kubectl, namespace, "approve")
        return current if (current.get("status") or {}).get("proposal") else None

    waiting = wait_for("a proposal", proposed, timeout=60)
    proposal = waiting["status"]["proposal"]
    assert proposal["moves"] > 0
    assert "approve-g-2" in proposal["assignment"]
    assert condition(waiting, "PlanApplied")["reason"] == "AwaitingApproval"
    time.sleep(3)
    assert epochs.see(int(plan_of(kubectl, namespace, "approve")["epoch"])) == epoch, (
        "nothing applied before approval"
    )
    approve = subprocess.run(
        [GROUPOPS, "approve", "approve", "-n", namespace, "--proposal", proposal["id"], "--timeout", "60"],
        env={**os.environ, "KUBECONFIG": kubectl.kubeconfig},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert approve.returncode == 0, approve.stderr
    assert proposal["id"] in approve.stdout

    def applied() -> dict[str, Any] | None:
        current = cgp(kubectl, namespace, "approve")
        status = current.get("status") or {}
        done = (
            status.get("epoch", 0) > epoch
            and not status.get("proposal")
            and status.get("approvedProposal") == proposal["id"]
        )
        return current if done else None

    after = wait_for("the approved plan", applied, timeout=60)
    epochs.see(after["status"]["epoch"])

    def as_proposed() -> bool:
        members = cgp(kubectl, namespace, "approve")["status"]["members"]
        return {m["instanceId"]: m["partitions"] for m in members} == proposal["assignment"]

    wait_for("the consumers' sets to reach the approved proposal", as_proposed, timeout=60)
    epochs.see(int(plan_of(kubectl, namespace, "approve")["epoch"]))


def test_dry_run_reports_and_applies_nothing(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    kubectl.apply(policy("dry", 3, dryRun=True), namespace)

    def reported() -> dict[str, Any] | None:
        current = cgp(kubectl, namespace, "dry")
        return current if condition(current, "PlanApplied").get("reason") == "DryRun" else None

    current = wait_for("a dry-run report", reported, timeout=60)
    assert sum(len(m["partitions"]) for m in current["status"]["members"]) == 10
    assert condition(current, "Ready")["status"] == "True"
    time.sleep(2)
    assert pods(kubectl, namespace, "dry") == []
    assert kubectl.get_json("configmap", "dry-plan", namespace) is None
    assert kubectl.get_json("serviceaccount", "dry-consumer", namespace) is None
    assert (current["status"].get("epoch") or 0) == 0


def test_deletion_removes_everything_the_policy_owns(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    epochs = EpochWatch()
    kubectl.apply(policy("gone", 2), namespace)
    converged(kubectl, namespace, "gone", 2, epochs)
    assert kubectl.get_json("cgp", "gone", namespace)["metadata"].get("finalizers") in (None, [])
    kubectl.run("delete", "cgp", "gone", "-n", namespace, "--wait=true", "--timeout=60s")
    assert kubectl.get_json("cgp", "gone", namespace) is None, "no finalizer holds the policy"
    selector = "groupops.dev/policy=gone"
    kinds = ("pods", "leases", "configmaps", "roles", "rolebindings", "serviceaccounts")

    def all_gone() -> bool:  # the operator removes them (this stack runs no garbage collector)
        return all(kubectl.items(kind, namespace, selector) == [] for kind in kinds)

    wait_for("everything the policy owned to be removed", all_gone, timeout=60)
