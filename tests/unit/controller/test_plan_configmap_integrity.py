"""The plan ConfigMap carries a digest and the leader term that wrote it: a plan edited by hand,
or written by a groupops without digests, reads as lost (the handoff then resyncs), and the term
is readable so a deposed leader can tell that a newer one wrote the plan."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from groupops.controller.render_common import PolicyRef
from groupops.controller.render_plan import (
    ANNOTATION_DIGEST,
    configmap_term,
    read_plan_configmap,
    render_plan_configmap,
)
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release

POLICY = PolicyRef(namespace="team-a", name="orders", uid="uid-1", generation=3)
A, B = MemberId("g-0"), MemberId("g-1")


def published(barrier: int | None = None) -> PublishedPlan:
    return PublishedPlan(
        plan=Plan(
            epoch=7,
            strategy="range",
            assignment={A: (TopicPartition("t", 0),), B: (TopicPartition("t", 1),)},
        ),
        releasing={TopicPartition("t", 2): Release(identity=B, epoch=7, since=1.5)},
        barrier=barrier,
    )


def rendered(**kwargs: Any) -> dict[str, Any]:
    return render_plan_configmap(
        POLICY, published(**kwargs), generation=3, members=["g-0", "g-1"], leader="op-a", term=4
    )


@pytest.mark.parametrize("barrier", [None, 7], ids=["plain", "resync"])
def test_an_untouched_plan_reads_back_as_written(barrier: int | None) -> None:
    observed = read_plan_configmap(rendered(barrier=barrier))
    assert observed is not None
    assert observed.published == published(barrier=barrier)
    assert observed.members == frozenset({"g-0", "g-1"})


def edit_data(configmap: dict[str, Any]) -> None:
    configmap["data"]["g-0"] = json.dumps([["t", 0], ["t", 1]])


def edit_releasing(configmap: dict[str, Any]) -> None:
    configmap["metadata"]["annotations"]["groupops.dev/releasing"] = "[]"


def edit_epoch(configmap: dict[str, Any]) -> None:
    configmap["data"]["epoch"] = "9"


def drop_digest(configmap: dict[str, Any]) -> None:
    del configmap["metadata"]["annotations"][ANNOTATION_DIGEST]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(edit_data, id="a-partition-given-twice"),
        pytest.param(edit_releasing, id="pending-releases-dropped"),
        pytest.param(edit_epoch, id="epoch-bumped"),
        pytest.param(drop_digest, id="no-digest"),
    ],
)
def test_a_plan_changed_by_hand_reads_as_lost(edit: Any) -> None:
    configmap = copy.deepcopy(rendered())
    edit(configmap)
    assert read_plan_configmap(configmap) is None


def test_annotations_of_others_do_not_count() -> None:
    configmap = copy.deepcopy(rendered())
    configmap["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] = "x"
    assert read_plan_configmap(configmap) is not None


def test_the_writer_term_is_recorded() -> None:
    assert configmap_term(rendered()) == 4
    assert configmap_term(None) == -1
    without = render_plan_configmap(POLICY, published(), generation=3, members=[])
    assert configmap_term(without) == -1
