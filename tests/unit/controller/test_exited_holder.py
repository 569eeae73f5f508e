"""A replica whose pod's status shows its container gone is fenced in the next run, and its
partitions handed on, even though the heartbeat guard heard it less than a Lease duration ago
(planner/exits.py, docs/design.md §7.5); without that status the guard keeps it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from groupops.controller.heartbeats import HeartbeatBook
from groupops.model import MemberId
from groupops.planner.liveness import Heartbeat, HeartbeatStatus
from tests.unit.controller.reconcile_support import reconcile_with_readers
from tests.unit.controller.test_monitoring_metrics import STATIC, World


class HeartbeatWorld(World):
    """`World` with the operator answering heartbeats, and replicas that report in heartbeat mode
    from processes that name their pod."""

    def __init__(self) -> None:
        super().__init__(STATIC)
        self.book = HeartbeatBook(
            leases=lambda ns, name: self.kube.get("coordination.k8s.io/v1", "Lease", ns, name),
            leading=lambda: True,
            leader_address=lambda: None,
        )
        self.book.attach("ns", "p", self.memory.clock)

    def run(self) -> Any:
        return reconcile_with_readers(
            self.kube,
            self.readers,
            self.memory,
            metrics=self.metrics,
            wall_clock=self.clock,
            heartbeats=self.book,
        )

    @staticmethod
    def pod(identity: str) -> str:
        return f"p-{identity.rsplit('-', 1)[1]}"  # identity g-<i> runs in pod p-<i>

    def incarnation(self, identity: str) -> str:
        return f"proc-{identity}@uid-{self.pod(identity)}"

    def take_and_acknowledge(self, *identities: str) -> datetime:
        """Each replica takes its Lease now and acknowledges, from a container started 2 s before;
        returns when they took it."""
        taken = self.clock.now
        self.acknowledge(*identities, incarnation=self.incarnation)
        for identity in identities:
            self.container(identity, started=taken - timedelta(seconds=2))
        return taken

    def container(self, identity: str, *, started: datetime) -> None:
        pod = self.pod(identity)
        self.kube.patch("v1", "Pod", "ns", pod, {"metadata": {"uid": f"uid-{pod}"}})
        state = {"running": {"startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ")}}
        status = {"containerStatuses": [{"name": "consumer", "state": state, "restartCount": 0}]}
        self.kube.patch("v1", "Pod", "ns", pod, {"status": status}, subresource="status")

    def beat(self, identity: str) -> HeartbeatStatus:
        heartbeat = Heartbeat(
            namespace="ns", lease=f"p-{identity}", incarnation=self.incarnation(identity), seq=1
        )
        return self.book.answer(heartbeat).status

    def released_through(self, identity: str) -> str | None:
        lease = self.kube.get("coordination.k8s.io/v1", "Lease", "ns", f"p-{identity}")
        assert lease is not None
        return lease["metadata"]["annotations"].get("groupops.dev/released-through")


@pytest.mark.parametrize("restarted", [True, False], ids=["container-restarted", "container-still-running"])
def test_a_holder_whose_container_restarted_is_fenced_at_once_despite_a_fresh_heartbeat(
    restarted: bool,
) -> None:
    world = HeartbeatWorld()
    world.run()
    taken = world.take_and_acknowledge("g-0", "g-1", "g-2")
    world.run()
    world.silence("g-2")  # its Lease unchanged for a minute: only a fresh grant vouches for it
    assert world.beat("g-2") is HeartbeatStatus.GRANTED
    if restarted:
        world.container("g-2", started=taken + timedelta(seconds=30))

    world.run()

    if restarted:
        assert world.released_through("g-2") is not None, "fenced although heard just now"
        assert world.value("groupops_fences_total") == 1
        world.run()
        assignment = world.plan().plan.assignment
        assert not assignment.get(MemberId("g-2")), "its partition went to the others"
        assert sum(len(assignment.get(MemberId(i), ())) for i in ("g-0", "g-1")) == 3
        assert world.beat("g-2") is HeartbeatStatus.REFUSED, "the gone incarnation is granted no more"
    else:
        assert world.released_through("g-2") is None, "a heartbeat granted within the Lease duration keeps it"
        assert world.value("groupops_fences_total") is None
