"""A Lease holder whose container the kubelet reports gone is void at once (planner/exits.py,
docs/design.md §7.5): the cases, and the property that makes it safe: whatever the pod's history
and whenever its status is read, the rule never calls a process gone that is still running."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupops.planner.exits import EXIT_MARGIN_S, holder_exited, incarnation_for, pod_uid_of
from groupops.planner.plan_format import format_micro_time, lease_record

CONTAINER = "consumer"
POD_UID = "7d0c5b7e-2f4e-4c53-9b1a-0d9a2f1c3e11"
TAKEN = datetime(2026, 11, 29, 10, 0, 0, 500_000, tzinfo=UTC).timestamp()


def kubelet_time(seconds: float) -> str:
    """As the API shows a container's times: whole seconds, truncated."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lease(
    *,
    incarnation: str | None = f"abc@{POD_UID}",
    holder: str | None = "orders-0",
    taken: float | None = TAKEN,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": 4}
    if holder is not None:
        spec["holderIdentity"] = holder
    if taken is not None:
        spec["acquireTime"] = format_micro_time(taken)
    annotations = {} if incarnation is None else {"groupops.dev/incarnation": incarnation}
    return {"metadata": {"name": "p-orders-0", "annotations": annotations}, "spec": spec}


def pod(status: dict[str, Any], *, uid: str = POD_UID, name: str = CONTAINER) -> dict[str, Any]:
    return {
        "metadata": {"name": "p-0", "uid": uid},
        "status": {"containerStatuses": [{"name": name, **status}]},
    }


def running(started: float) -> dict[str, Any]:
    return {"running": {"startedAt": kubelet_time(started)}}


def terminated(started: float, finished: float) -> dict[str, Any]:
    return {
        "terminated": {
            "startedAt": kubelet_time(started),
            "finishedAt": kubelet_time(finished),
            "exitCode": 137,
        }
    }


WAITING = {"waiting": {"reason": "CrashLoopBackOff"}}


def exited(the_lease: dict[str, Any] | None, the_pod: dict[str, Any] | None) -> bool:
    """The rule as the reconcile asks it, with the incarnation read from the Lease's record."""
    incarnation = (
        None if the_lease is None else lease_record(the_lease["metadata"]["annotations"]).incarnation
    )
    return holder_exited(the_lease, the_pod, container=CONTAINER, incarnation=incarnation)


@pytest.mark.parametrize(
    ("the_lease", "the_pod", "gone"),
    [
        pytest.param(
            lease(),
            pod({"state": running(TAKEN + 30), "lastState": terminated(TAKEN - 60, TAKEN + 29)}),
            True,
            id="restarted-after-the-take",
        ),
        pytest.param(
            lease(),
            pod({"state": WAITING, "lastState": terminated(TAKEN - 60, TAKEN + 5)}),
            True,
            id="waiting-to-restart-after-an-exit-after-the-take",
        ),
        pytest.param(
            lease(), pod({"state": terminated(TAKEN - 60, TAKEN + 5)}), True, id="terminated-never-restarted"
        ),
        pytest.param(
            lease(), pod({"state": running(TAKEN - 0.4)}), False, id="the-holder-is-the-running-container"
        ),
        pytest.param(
            lease(),
            pod({"state": running(TAKEN - 60), "lastState": terminated(TAKEN - 90, TAKEN - 61)}),
            False,
            id="an-exit-before-the-take",
        ),
        pytest.param(
            lease(),
            pod({"state": WAITING, "lastState": terminated(TAKEN - 60, TAKEN + EXIT_MARGIN_S)}),
            False,
            id="an-exit-within-the-margin-of-the-take",
        ),
        pytest.param(
            lease(),
            pod({"state": running(TAKEN + 30)}, uid="another-pod-of-the-same-name"),
            False,
            id="a-new-pod-says-nothing-of-the-old-pods-process",
        ),
        pytest.param(
            lease(incarnation="abc"),
            pod({"state": running(TAKEN + 30)}),
            False,
            id="an-incarnation-without-a-pod",
        ),
        pytest.param(
            lease(incarnation=None), pod({"state": running(TAKEN + 30)}), False, id="no-incarnation"
        ),
        pytest.param(lease(holder=None), pod({"state": running(TAKEN + 30)}), False, id="released"),
        pytest.param(lease(taken=None), pod({"state": running(TAKEN + 30)}), False, id="no-take-time"),
        pytest.param(
            lease(),
            pod({"state": running(TAKEN + 30)}, name="sidecar"),
            False,
            id="another-container-restarted",
        ),
        pytest.param(lease(), pod({"state": WAITING}), False, id="never-started"),
        pytest.param(
            lease(), pod({"state": {"running": {"startedAt": "yesterday"}}}), False, id="a-malformed-time"
        ),
        pytest.param(lease(), None, False, id="no-pod"),
        pytest.param(None, pod({"state": running(TAKEN + 30)}), False, id="no-lease"),
    ],
)
def test_a_holder_is_gone_only_when_its_own_pod_shows_its_container_ended_after_the_take(
    the_lease: dict[str, Any] | None, the_pod: dict[str, Any] | None, gone: bool
) -> None:
    assert exited(the_lease, the_pod) is gone


def test_an_incarnation_names_its_pod_and_is_new_every_time() -> None:
    first, second = incarnation_for(POD_UID), incarnation_for(POD_UID)
    assert first != second
    assert pod_uid_of(first) == pod_uid_of(second) == POD_UID
    assert pod_uid_of(incarnation_for(None)) is None
    assert pod_uid_of(incarnation_for("")) is None
    assert pod_uid_of("0123456789abcdef") is None
    assert pod_uid_of(None) is None


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[tuple[float, float | None]], int, float, float]:
    """Instances of one container, one after another: (start, end or None while running); the
    holder's instance; its take, while it ran; a moment at or after the take to read the status."""
    moment = TAKEN - 100
    instances: list[tuple[float, float | None]] = []
    for _ in range(draw(st.integers(1, 5))):
        start = moment + draw(st.floats(0, 15))
        end = start + draw(st.floats(0, 40))
        instances.append((start, end))
        moment = end
    if draw(st.booleans()):
        instances[-1] = (instances[-1][0], None)  # the last one still runs
    holder = draw(st.integers(0, len(instances) - 1))
    start, end = instances[holder]
    taken = start + draw(st.floats(0, 1)) * ((end if end is not None else start + 40) - start)
    read_at = taken + draw(st.floats(0, 200))
    return instances, holder, taken, read_at


def status_at(instances: list[tuple[float, float | None]], moment: float) -> dict[str, Any] | None:
    """What a kubelet reports at `moment`: the newest instance started by then, and the one before."""
    started = [(i, instance) for i, instance in enumerate(instances) if instance[0] <= moment]
    if not started:
        return None
    index, (start, end) = started[-1]
    status: dict[str, Any] = {}
    if end is None or end > moment:
        status["state"] = running(start)
        if index > 0:
            before_start, before_end = instances[index - 1]
            assert before_end is not None
            status["lastState"] = terminated(before_start, before_end)
    else:
        status["state"] = WAITING
        status["lastState"] = terminated(start, end)
    return status


@given(histories())
def test_a_running_holder_is_never_called_gone(
    history: tuple[list[tuple[float, float | None]], int, float, float],
) -> None:
    instances, holder, taken, read_at = history
    status = status_at(instances, read_at)
    assert status is not None  # the holder's own instance had started
    ended = instances[holder][1]
    gone = ended is not None and ended <= read_at
    if exited(lease(taken=taken), pod(status)):
        assert gone, f"holder {holder} of {instances} called gone at {read_at}, taken at {taken}"
    elif gone and holder < len(instances) - 1 and instances[holder + 1][0] <= read_at:
        # A successor started: the only way the rule holds back is the margin (or truncation).
        assert instances[holder + 1][0] - taken <= EXIT_MARGIN_S + 1
