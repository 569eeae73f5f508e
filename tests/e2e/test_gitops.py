"""GitOps on the real API server: a second field manager standing in for Argo CD applies every
example with server-side apply, twice, with the operator running between; nothing conflicts,
`kubectl diff` finds nothing to heal, the operator wrote nothing but status, and Flux's kstatus
and Argo CD's health check read the real status objects as documented (docs/design.md §13).
Approval by proposal id, committed as Git would, applies once and never again."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
import yaml

from tests.e2e.consumer_e2e import StackFactory
from tests.e2e.operator_support import (
    EXAMPLES,
    GROUPOPS,
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    example,
    settled,
)
from tests.e2e.waiting import wait_for
from tests.fixtures.gitops import argocd_health, kstatus, require_gitopscheck

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

GIT = "argocd-controller"
"""The field manager of the GitOps tool (Argo CD's is `argocd-controller`)."""
NAMES = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))


def sync(kubectl: Kubectl, document: dict[str, Any], namespace: str) -> None:
    """What Argo CD's server-side sync does: apply Git's document under its own field manager,
    without forcing conflicts (a conflict would mean another writer owns a field Git holds)."""
    kubectl.run(
        "apply", "--server-side", f"--field-manager={GIT}", "-n", namespace, "-f", "-",
        stdin=yaml.safe_dump(document),
    )  # fmt: skip


def drift(kubectl: Kubectl, document: dict[str, Any], namespace: str) -> str:
    """What self-heal would change: `kubectl diff` against the live object ('' when nothing)."""
    result = kubectl.run(
        "diff", "--server-side", f"--field-manager={GIT}", "-n", namespace, "-f", "-",
        stdin=yaml.safe_dump(document), check=False,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def mark_pods_ready(kubectl: Kubectl, namespace: str, policy: str) -> None:
    """The kubelet's part (no kubelet runs here): every pod of the policy reports Ready."""
    ready = '{"status":{"conditions":[{"type":"Ready","status":"True"}],"phase":"Running"}}'
    for pod in kubectl.items("pods", namespace, f"groupops.dev/policy={policy}"):
        kubectl.run(
            "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
            "--type=merge", "-p", ready,
        )  # fmt: skip


def reconciled(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    policy = cgp(kubectl, namespace, name)
    status = policy.get("status") or {}
    current = status.get("observedGeneration") == policy["metadata"]["generation"]
    idle = condition(policy, "Reconciling").get("status") == "False"
    return policy if current and idle and condition(policy, "Ready").get("status") == "True" else None


def operator_writes_status_only(kubectl: Kubectl, namespace: str, name: str) -> None:
    shown = kubectl.run("get", "cgp", name, "-n", namespace, "-o", "json", "--show-managed-fields")
    meta = json.loads(shown.stdout)["metadata"]
    assert not meta.get("finalizers"), meta.get("finalizers")
    assert not meta.get("annotations"), meta.get("annotations")
    managers = {(entry["manager"], entry.get("subresource", "")) for entry in meta["managedFields"]}
    assert {manager for manager, _ in managers} <= {GIT, "groupops"}, managers
    assert ("groupops", "status") in managers
    assert ("groupops", "") not in managers, "the operator wrote outside status"


@pytest.fixture(scope="module", autouse=True)
def tool() -> None:
    require_gitopscheck()


def test_applying_from_git_twice_leaves_nothing_to_heal(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    documents = {name: example(name) for name in NAMES}
    for document in documents.values():
        sync(kubectl, document, namespace)
    for name, document in documents.items():
        policy = document["metadata"]["name"]
        wait_for(f"{name} to publish its first plan", settled(kubectl, namespace, policy), timeout=90)
        mark_pods_ready(kubectl, namespace, policy)
    time.sleep(3)  # a few reconciles with the operator running between the two syncs
    for document in documents.values():
        sync(kubectl, document, namespace)  # raises on a conflict
    for name, document in documents.items():
        policy_name = document["metadata"]["name"]
        policy = wait_for(
            f"{name} to be reconciled with every replica ready",
            lambda n=policy_name: reconciled(kubectl, namespace, n),
            timeout=60,
        )
        assert drift(kubectl, document, namespace) == "", f"{name}: self-heal would change the policy"
        operator_writes_status_only(kubectl, namespace, policy_name)
        assert kstatus(policy)["status"] == "Current", (name, kstatus(policy))
        assert argocd_health(policy)["status"] == "Healthy", (name, argocd_health(policy))
    assert operator.alive()


def test_approval_by_id_from_git_applies_once(new_stack: StackFactory) -> None:
    """Real consumers (the kubelet harness), so that partitions are held and every proposal moves
    partitions between live replicas."""
    with new_stack(partitions=6) as s:
        manual = {"approval": "manual"}
        document = s.policy(rebalance=manual, consumers={"replicas": 2})
        sync(s.kubectl, document, s.namespace)
        wait_for(
            "two replicas holding the first plan", lambda: s.settled([s.identity(0), s.identity(1)]), 120
        )
        epoch = int(s.status()["epoch"])
        held = s.sets()

        document["spec"]["consumers"]["replicas"] = 3  # a change in Git that moves partitions
        sync(s.kubectl, document, s.namespace)

        def proposed() -> dict[str, Any] | None:
            policy = cgp(s.kubectl, s.namespace, s.name)
            return policy if (policy.get("status") or {}).get("proposal", {}).get("id") else None

        waiting = wait_for("a proposal", proposed, timeout=120)
        proposal = waiting["status"]["proposal"]
        assert argocd_health(waiting)["status"] == "Suspended", argocd_health(waiting)
        assert proposal["id"] in condition(waiting, "PlanApplied")["message"]
        assert s.sets() == held, "no partition moved before the approval"

        document["spec"]["rebalance"]["approvedProposal"] = proposal["id"]  # the approval, committed to Git
        sync(s.kubectl, document, s.namespace)
        identities = [s.identity(i) for i in range(3)]

        def published() -> dict[str, Any] | None:
            policy = cgp(s.kubectl, s.namespace, s.name)
            status = policy.get("status") or {}
            done = status.get("approvedProposal") == proposal["id"] and not status.get("proposal")
            return policy if done and s.settled(identities) else None

        after = wait_for("the approved proposal, handed over", published, timeout=120)
        assert after["spec"]["rebalance"]["approvedProposal"] == proposal["id"], "the approval stays in Git"
        sets = {k: sorted(str(tp) for tp in v) for k, v in s.sets().items()}
        assert sets == proposal["assignment"], "the consumers hold what was approved"
        assert int(after["status"]["epoch"]) > epoch
        healthy = wait_for("Ready and idle", lambda: reconciled(s.kubectl, s.namespace, s.name), timeout=60)
        assert kstatus(healthy)["status"] == "Current" and argocd_health(healthy)["status"] == "Healthy"

        # The approval stays in Git; the next change's proposal has another id, which it does not approve.
        document["spec"]["consumers"]["replicas"] = 4
        sync(s.kubectl, document, s.namespace)
        again = wait_for("the next proposal", proposed, timeout=120)
        assert again["status"]["proposal"]["id"] != proposal["id"]
        note = condition(again, "PlanApplied")["message"]
        assert f"{proposal['id']}, which was applied already" in note
        before = s.sets()
        time.sleep(3)
        assert s.sets() == before, "an approval left in Git approves nothing more"
        assert "proposal" in s.status()
        assert drift(s.kubectl, document, s.namespace) == ""
        operator_writes_status_only(s.kubectl, s.namespace, s.name)


def test_groupops_approve_refuses_an_id_that_is_not_standing(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    document = example("manual-approval")
    document["metadata"]["name"] = "approve-cli"
    document["spec"]["groupId"] = "approve-cli"  # the example's own policy runs `inventory` here
    sync(kubectl, document, namespace)
    wait_for("the first plan", settled(kubectl, namespace, "approve-cli"), timeout=90)
    result = subprocess.run(
        [GROUPOPS, "approve", "approve-cli", "-n", namespace, "--proposal", "p-000000000000"],
        env={"KUBECONFIG": kubectl.kubeconfig, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result
    assert "no proposal waits for approval" in result.stderr
