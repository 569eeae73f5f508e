"""A plan from the Spark pipeline, written by `groupops propose` into the policy's annotation, is
the standing proposal of a policy with approval manual (trigger PipelinePlan); approved by its id
it is published, `status.pipelinePlanApplied` remembers it and it is never proposed again. A plan
that does not fit the policy is refused with a Warning Event naming why, once, and the operator
plans as usual; with approval auto the annotation is ignored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from groupops.controller.pipeline_plan import PIPELINE_PLAN_ANNOTATION, annotation_for, pipeline_plan
from groupops.controller.reconcile import PolicyMemory
from groupops.model import TopicPartition
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.test_reconcile_steps import SPEC, Clock, approve, run

MANUAL = {**SPEC, "rebalance": {"approval": "manual"}, "consumers": {"replicas": 2}}
TOPICS = {"t": 6}


def tp(text: str) -> TopicPartition:
    topic, _, number = text.rpartition("-")
    return TopicPartition(topic, int(number))


def annotate(kube: FakeKube, assignment: dict[str, list[str]]) -> str:
    value = annotation_for(
        {identity: [tp(item) for item in items] for identity, items in assignment.items()},
        source="/data/plan",
        created_at="2026-11-27T00:00:00Z",
    )
    kube.objects[("ConsumerGroupPolicy", "ns", "p")]["metadata"]["annotations"] = {
        PIPELINE_PLAN_ANNOTATION: value
    }
    return str(json.loads(value)["id"])


def members(kube: FakeKube) -> dict[str, list[str]]:
    return {m["instanceId"]: m["partitions"] for m in kube.policy("ns", "p")["status"]["members"]}


def swapped(current: dict[str, list[str]]) -> dict[str, list[str]]:
    """The current plan with the first partition of g-0 given to g-1."""
    moved = current["g-0"][0]
    return {"g-0": current["g-0"][1:], "g-1": sorted([*current["g-1"], moved])}


def reasons(kube: FakeKube) -> list[str]:
    return [obj["reason"] for (kind, _, _), obj in kube.objects.items() if kind == "Event"]


def test_a_pipeline_plan_is_proposed_published_once_approved_and_never_proposed_again() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", MANUAL)
    assert run(kube, clock, memory).epoch == 1
    wanted = swapped(members(kube))
    plan_id = annotate(kube, wanted)
    clock.advance(1)
    assert run(kube, clock, memory).epoch == 1
    proposal = kube.policy("ns", "p")["status"]["proposal"]
    assert proposal["trigger"] == "PipelinePlan" and proposal["moves"] == 1
    assert proposal["assignment"] == wanted

    approve(kube, MANUAL, proposal["id"])
    kube.objects[("ConsumerGroupPolicy", "ns", "p")]["metadata"]["annotations"] = {
        PIPELINE_PLAN_ANNOTATION: annotation_for(
            {i: [tp(x) for x in xs] for i, xs in wanted.items()},
            source="/data/plan",
            created_at="2026-11-27T00:00:00Z",
        )
    }
    epochs = []
    for _ in range(3):
        clock.advance(1)
        epochs.append(run(kube, clock, memory).epoch)
    status = kube.policy("ns", "p")["status"]
    assert members(kube) == wanted and epochs[-1] > 1
    assert status["pipelinePlanApplied"] == plan_id and "proposal" not in status

    # the plan moves on (a lag-driven proposal of its own would be another matter): the applied
    # pipeline plan is not proposed again even when the published plan no longer equals it
    kube.put_policy(
        "ns", "p", {**MANUAL, "rebalance": {"approval": "manual", "approvedProposal": proposal["id"]}}
    )
    clock.advance(1)
    run(kube, clock, memory)
    assert (kube.policy("ns", "p")["status"].get("proposal") or {}).get("trigger") != "PipelinePlan"


def test_a_plan_that_does_not_fit_is_refused_once_with_the_reason_and_planning_goes_on() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", MANUAL)
    run(kube, clock, memory)
    current = members(kube)
    annotate(kube, {**current, "g-7": []})
    for _ in range(2):
        clock.advance(1)
        run(kube, clock, memory)
    assert reasons(kube).count("PipelinePlanRefused") == 1
    assert "proposal" not in kube.policy("ns", "p")["status"]
    assert members(kube) == current


def test_with_approval_auto_a_pipeline_plan_is_ignored() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    auto = {**MANUAL, "rebalance": {"approval": "auto"}}
    kube.put_policy("ns", "p", auto)
    run(kube, clock, memory)
    current = members(kube)
    annotate(kube, swapped(current))
    clock.advance(1)
    run(kube, clock, memory)
    assert members(kube) == current and "PipelinePlanRefused" not in reasons(kube)


def plan_of(assignment: dict[str, list[str]], applied: str | None = None) -> Any:
    value = annotation_for(
        {i: [tp(x) for x in xs] for i, xs in assignment.items()},
        source="s",
        created_at="2026-11-27T00:00:00Z",
    )
    return pipeline_plan(
        {PIPELINE_PLAN_ANNOTATION: value},
        members={"g-0", "g-1"},
        everyone=["g-0", "g-1", "g-2"],
        topics=TOPICS,
        applied=applied,
    )


ALL = ["t-0", "t-1", "t-2", "t-3", "t-4", "t-5"]


@pytest.mark.parametrize(
    ("assignment", "problem"),
    [
        pytest.param({"g-0": ALL, "g-2": []}, "g-2 does not take part", id="identity-not-taking-part"),
        pytest.param({"g-0": ALL, "g-1": ["t-0"]}, "t-0 is given twice", id="twice"),
        pytest.param({"g-0": ALL[:5]}, "it leaves out t-5", id="left-out"),
        pytest.param({"g-0": [*ALL, "t-6"]}, "t-6 (of g-0) is not a partition", id="beyond-the-topic"),
        pytest.param({"g-0": [*ALL, "u-0"]}, "u-0 (of g-0) is not a partition", id="unknown-topic"),
    ],
)
def test_a_plan_that_does_not_fit_says_why(assignment: dict[str, list[str]], problem: str) -> None:
    plan = plan_of(assignment)
    assert plan.entries is None and problem in plan.problem


def test_a_fitting_plan_covers_everyone_and_an_applied_one_is_none() -> None:
    plan = plan_of({"g-0": ALL[:3], "g-1": ALL[3:]})
    assert plan.entries is not None and plan.entries["g-2"] == () and len(plan.entries["g-0"]) == 3
    assert plan_of({"g-0": ALL[:3], "g-1": ALL[3:]}, applied=plan.id) is None
    garbled = pipeline_plan({PIPELINE_PLAN_ANNOTATION: "{"}, members=(), everyone=(), topics={}, applied=None)
    assert garbled is not None and "groupops propose" in (garbled.problem or "")
