"""What Argo CD (our Lua health check) and Flux (kstatus) show for each state of a policy.

The status objects follow the operator's kstatus-style status: `observedGeneration`, and the
conditions Ready, PlanApplied, Degraded, Reconciling and Stalled, each with reason, message,
observedGeneration and lastTransitionTime. Both verdicts come from the real code, run by the
gitopscheck tool (`make gitopscheck`): the script in gopher-lua as Argo CD runs it, and
cli-utils' kstatus.Compute. docs/gitops.md explains the table to users; keep the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gitops import argocd_health, kstatus, require_gitopscheck

GENERATION = 4
_STAMP = "2025-01-01T00:00:00Z"


@pytest.fixture(autouse=True, scope="module")
def _built() -> None:
    require_gitopscheck()


def condition(kind: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": GENERATION,
        "lastTransitionTime": _STAMP,
    }


def policy(
    *conditions: dict[str, Any],
    observed: int | None = GENERATION,
    status: bool = True,
    spec: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    **extra_status: Any,
) -> dict[str, Any]:
    """A ConsumerGroupPolicy at metadata.generation GENERATION with the given status."""
    obj: dict[str, Any] = {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {
            "name": "orders",
            "namespace": "payments",
            "generation": GENERATION,
            "uid": "0b7e5c1c-6d0e-4a59-9a8e-3c2f1f0e9a11",
            **(metadata or {}),
        },
        "spec": {"groupId": "orders", "topics": ["orders"], **(spec or {})},
    }
    if status:
        body: dict[str, Any] = {"conditions": list(conditions), **extra_status}
        if observed is not None:
            body["observedGeneration"] = observed
        obj["status"] = body
    return obj


RUNNING = condition("Ready", True, "Reconciled", "plan epoch 7 published for 3 replicas")
PUBLISHED = condition("PlanApplied", True, "Published", "consumers follow epoch 7")
NOT_DEGRADED = condition("Degraded", False, "AsExpected")
NOT_RECONCILING = condition("Reconciling", False, "Reconciled")
NOT_STALLED = condition("Stalled", False, "AsExpected")


@dataclass(frozen=True)
class Case:
    obj: dict[str, Any]
    argo: str
    argo_message: str
    kstatus: str


CASES = [
    pytest.param(
        Case(
            obj=policy(status=False),
            argo="Progressing",
            argo_message="waiting for the operator to observe generation 4",
            # kstatus has nothing to go on and calls an object with no status Current: Flux
            # can pass a health check applied before the operator's first status write.
            kstatus="Current",
        ),
        id="just created, no status",
    ),
    pytest.param(
        Case(
            obj=policy(RUNNING, PUBLISHED, NOT_DEGRADED, observed=GENERATION - 1),
            argo="Progressing",
            argo_message="waiting for the operator to observe generation 4",
            kstatus="InProgress",
        ),
        id="spec changed, operator has not observed it",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                condition("PlanApplied", False, "HandoffInProgress", "epoch 7 -> 8: 2 releases pending"),
                NOT_DEGRADED,
                condition("Reconciling", True, "HandoffInProgress", "epoch 7 -> 8: 2 releases pending"),
                NOT_STALLED,
            ),
            argo="Progressing",
            argo_message="HandoffInProgress: epoch 7 -> 8: 2 releases pending",
            kstatus="InProgress",
        ),
        id="reconciling, handoff in flight",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "LagPending", "1 of 3 pods ready"),
                condition("PlanApplied", False, "LagPending", "first plan not published"),
                NOT_DEGRADED,
                condition("Reconciling", True, "FirstPlan", "waiting for pods before the first plan"),
            ),
            argo="Progressing",
            argo_message="FirstPlan: waiting for pods before the first plan",
            kstatus="InProgress",
        ),
        id="reconciling, first plan not yet published",
    ),
    pytest.param(
        Case(
            obj=policy(RUNNING, PUBLISHED, NOT_DEGRADED, NOT_RECONCILING, NOT_STALLED),
            argo="Healthy",
            argo_message="Reconciled: plan epoch 7 published for 3 replicas",
            kstatus="Current",
        ),
        id="healthy, running",
    ),
    pytest.param(
        Case(
            obj=policy(RUNNING, PUBLISHED, NOT_DEGRADED),
            argo="Healthy",
            argo_message="Reconciled: plan epoch 7 published for 3 replicas",
            kstatus="Current",
        ),
        id="healthy, Reconciling and Stalled absent",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", True, "DryRun", "dry run: the plan is computed and reported"),
                condition("PlanApplied", False, "DryRun", "dry run: nothing is applied"),
                NOT_DEGRADED,
            ),
            argo="Healthy",
            argo_message="DryRun: dry run: the plan is computed and reported",
            kstatus="Current",
        ),
        id="dry run",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "LagSourceUnavailable", "prometheus: connection refused"),
                condition("PlanApplied", False, "LagSourceUnavailable", "prometheus: connection refused"),
                condition("Degraded", True, "LagSourceUnavailable", "prometheus: connection refused"),
                NOT_RECONCILING,
                NOT_STALLED,
            ),
            argo="Degraded",
            argo_message="LagSourceUnavailable: prometheus: connection refused",
            # kstatus reads Ready=False as "not there yet", never as failed: Flux waits for its
            # timeout, then fails the health check.
            kstatus="InProgress",
        ),
        id="degraded, lag source down, not ready",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                PUBLISHED,
                condition("Degraded", True, "TopicsMissing", "topic refunds does not exist"),
                NOT_RECONCILING,
                NOT_STALLED,
            ),
            argo="Degraded",
            argo_message="TopicsMissing: topic refunds does not exist",
            kstatus="Current",
        ),
        id="ready but degraded",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                condition("PlanApplied", False, "AwaitingApproval", "proposal p-7f3a waits for approval"),
                NOT_DEGRADED,
                NOT_RECONCILING,
                NOT_STALLED,
                proposal={"id": "p-7f3a", "generation": GENERATION, "moves": 3},
            ),
            argo="Suspended",
            argo_message="proposal p-7f3a waits for approval",
            kstatus="Current",
        ),
        id="awaiting approval",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                condition("PlanApplied", False, "AwaitingApproval", "a proposal waits"),
                NOT_DEGRADED,
            ),
            argo="Suspended",
            argo_message="a proposal waits for approval",
            kstatus="Current",
        ),
        id="awaiting approval, proposal without id",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                condition("PlanApplied", False, "AwaitingApproval", "proposal p-7f3a waits for approval"),
                condition("Degraded", True, "ObjectRejected", "quota exceeded for orders-2"),
                proposal={"id": "p-7f3a"},
            ),
            argo="Degraded",
            argo_message="ObjectRejected: quota exceeded for orders-2",
            kstatus="Current",
        ),
        id="awaiting approval and degraded",
    ),
    pytest.param(
        Case(
            obj=policy(RUNNING, PUBLISHED, NOT_DEGRADED, spec={"paused": True}),
            argo="Suspended",
            argo_message="paused (spec.paused)",
            kstatus="Current",
        ),
        id="paused",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "InvalidSpec", "spec.consumers: set either replicas or autoscale"),
                condition("PlanApplied", False, "InvalidSpec", "spec.consumers: set either"),
                NOT_DEGRADED,
                NOT_RECONCILING,
                condition("Stalled", True, "InvalidSpec", "spec.consumers: set either replicas or autoscale"),
            ),
            argo="Degraded",
            argo_message="InvalidSpec: spec.consumers: set either replicas or autoscale",
            kstatus="Failed",
        ),
        id="stalled, invalid spec",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "AuthSecretForbidden", "secret kafka-auth: forbidden"),
                NOT_DEGRADED,
                condition("Stalled", True, "AuthSecretForbidden", "secret kafka-auth: forbidden"),
                condition("Reconciling", True, "Retrying", "retrying in 30 s"),
            ),
            argo="Degraded",
            argo_message="AuthSecretForbidden: secret kafka-auth: forbidden",
            kstatus="Failed",
        ),
        id="stalled and reconciling, Stalled listed first",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "AuthSecretForbidden", "secret kafka-auth: forbidden"),
                NOT_DEGRADED,
                condition("Reconciling", True, "Retrying", "retrying in 30 s"),
                condition("Stalled", True, "AuthSecretForbidden", "secret kafka-auth: forbidden"),
            ),
            argo="Degraded",
            argo_message="AuthSecretForbidden: secret kafka-auth: forbidden",
            # kstatus takes the first of Reconciling=True and Stalled=True in list order: with
            # both true, the operator's condition order decides what Flux sees.
            kstatus="InProgress",
        ),
        id="stalled and reconciling, Reconciling listed first",
    ),
    pytest.param(
        Case(
            obj=policy(
                condition("Ready", False, "NoReplicas", "consumers.replicas is 0"),
                condition("PlanApplied", True, "Published", "consumers follow epoch 7"),
                NOT_DEGRADED,
            ),
            argo="Progressing",
            argo_message="NoReplicas: consumers.replicas is 0",
            kstatus="InProgress",
        ),
        id="not ready, no replicas",
    ),
    pytest.param(
        Case(
            obj=policy(),
            argo="Progressing",
            argo_message="waiting for the operator's first conditions",
            kstatus="Current",
        ),
        id="observed, no conditions yet",
    ),
    pytest.param(
        Case(
            obj=policy(
                RUNNING,
                PUBLISHED,
                NOT_DEGRADED,
                metadata={"deletionTimestamp": _STAMP, "finalizers": ["groupops.dev/finalizer"]},
            ),
            argo="Progressing",
            argo_message="Pending deletion",
            kstatus="Terminating",
        ),
        id="being deleted",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_argo_cd_health_of_each_state(case: Case) -> None:
    assert argocd_health(case.obj) == {"status": case.argo, "message": case.argo_message}


@pytest.mark.parametrize("case", CASES)
def test_kstatus_of_each_state(case: Case) -> None:
    assert kstatus(case.obj)["status"] == case.kstatus


def test_a_spec_change_is_progressing_until_observed_whatever_the_old_conditions_say() -> None:
    stalled_before = policy(
        condition("Ready", False, "InvalidSpec", "bad"),
        condition("Stalled", True, "InvalidSpec", "bad"),
        observed=GENERATION - 1,
    )
    assert argocd_health(stalled_before)["status"] == "Progressing"
    assert kstatus(stalled_before)["status"] == "InProgress"


def test_yaml_input_is_read_like_json() -> None:
    text = (
        "apiVersion: groupops.dev/v1alpha1\nkind: ConsumerGroupPolicy\n"
        "metadata: {name: orders, generation: 2}\n"
        "status:\n  observedGeneration: 2\n"
        "  conditions:\n  - {type: Ready, status: 'True', reason: Running, message: ok}\n"
    )
    assert argocd_health(text) == {"status": "Healthy", "message": "Running: ok"}
    assert kstatus(text)["status"] == "Current"


def test_a_status_outside_argos_six_is_unknown_as_in_argo(tmp_path: Path) -> None:
    script = tmp_path / "bad.lua"
    script.write_text('return {status = "Fine", message = "x"}\n')
    assert argocd_health(policy(), script=script) == {
        "status": "Unknown",
        "message": "Lua returned an invalid health status",
    }


def test_the_string_library_is_closed_as_in_argo(tmp_path: Path) -> None:
    """Argo CD opens only base, table and package for a script from argocd-cm: a health check
    that calls string.* works in a plain Lua but fails in Argo (and in the tool)."""
    script = tmp_path / "strings.lua"
    script.write_text('return {status = string.upper("healthy")}\n')
    with pytest.raises(RuntimeError, match=r"non-table object\(nil\) with key 'upper'"):
        argocd_health(policy(), script=script)
