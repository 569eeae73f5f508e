"""status.members[].progress (controller/report.py) and its gauge (controller/metrics.py): what the
replica's last heartbeat reported, as of when it was heard."""

from __future__ import annotations

import pytest

from groupops.controller.heartbeats import HeardProgress, HeartbeatBook
from groupops.controller.metrics import Metrics
from groupops.controller.report import PROGRESS_SHOWN_AFTER_S, member_progress, progress_shown
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import Heartbeat
from tests.unit.controller.test_heartbeat_book import LEASE, NS, POLICY, World


def test_a_members_progress_names_each_value_in_whole_seconds_and_when_it_was_heard() -> None:
    heard = HeardProgress({"poll": 0.24, "advance": 13.0, "commit": 21.6}, 1_700_000_000.0, POLICY)
    assert member_progress(heard) == {
        "sinceLastPollSeconds": 0,
        "sinceProgressSeconds": 13,
        "sinceLastCommitSeconds": 22,
        "heardAt": "2023-11-14T22:13:20Z",
    }
    assert member_progress(HeardProgress({"poll": 12.5}, 1_700_000_000.0, POLICY)) == {
        "sinceLastPollSeconds": 12,
        "heardAt": "2023-11-14T22:13:20Z",
    }


@pytest.mark.parametrize(
    ("progress", "shown"),
    [
        ({"poll": 0.3, "commit": 40.0}, False),  # healthy: a commit long ago is an idle topic
        ({"poll": 0.3, "advance": 9.9}, False),
        ({"poll": 0.3, "advance": PROGRESS_SHOWN_AFTER_S}, True),
        ({"poll": 25.0}, True),
    ],
)
def test_progress_is_in_status_only_while_the_replica_is_behind(
    progress: dict[str, float], shown: bool
) -> None:
    assert progress_shown(HeardProgress(progress, 1_700_000_000.0, POLICY)) is shown


def test_each_heard_poll_sets_the_members_gauge_until_the_policy_is_forgotten() -> None:
    world, metrics = World(), Metrics()
    book = HeartbeatBook(
        leases=lambda ns, name: world.lease,
        leading=lambda: True,
        leader_address=lambda: None,
        metrics=metrics,
    )
    book.attach(NS, POLICY, LeaseClock())
    book.answer(Heartbeat(namespace=NS, lease=LEASE, incarnation="p1", seq=1, progress={"poll": 0.7}))
    labels = {"namespace": NS, "policy": POLICY, "identity": "worker-0"}
    assert metrics.registry.get_sample_value("groupops_member_seconds_since_poll", labels) == 0.7
    metrics.forget(NS, POLICY)
    assert metrics.registry.get_sample_value("groupops_member_seconds_since_poll", labels) is None
