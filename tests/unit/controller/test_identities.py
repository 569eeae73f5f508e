"""Slots, liveness, draining and members of one reconcile."""

from __future__ import annotations

from typing import Any

from groupops.controller.identities import LeaseClock, identity_view


def pod(ordinal: int, template: str = "h1", ready: bool = False, zone: str | None = None) -> dict[str, Any]:
    labels = {"groupops.dev/ordinal": str(ordinal), "groupops.dev/template-hash": template}
    if zone is not None:
        labels["groupops.dev/zone"] = zone
    return {
        "metadata": {"name": f"p-{ordinal}", "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def lease(name: str, holder: str | None, renew: str = "t1", partitions: str | None = None) -> dict[str, Any]:
    annotations = {} if partitions is None else {"groupops.dev/partitions": partitions}
    spec: dict[str, Any] = {"leaseDurationSeconds": 10, "renewTime": renew}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def view(
    replicas: int,
    pods: list[dict[str, Any]],
    leases: dict[str, Any] | None = None,
    *,
    clock: LeaseClock | None = None,
    now: float = 100.0,
    published: dict[str, Any] | None = None,
    template: str = "h1",
    startup_grace: float = 0.0,
    zones: tuple[str, ...] = (),
) -> Any:
    return identity_view(
        group_id="g",
        replicas=replicas,
        zones=zones,
        priorities={"g-2": 50},
        template_hash=template,
        pods=pods,
        leases=leases or {},
        published=published,
        clock=clock or LeaseClock(),
        now=now,
        lease_duration=10,
        startup_grace=startup_grace,
    )


def test_nobody_live_means_every_slot_takes_part() -> None:
    v = view(3, [pod(0), pod(1)])
    assert [m.name for m in v.members] == ["g-0", "g-1", "g-2"]
    assert [m.priority for m in v.members] == [-1, -2, 50]


def test_once_someone_is_live_only_live_identities_take_part() -> None:
    clock = LeaseClock()
    v = view(3, [pod(0), pod(1), pod(2)], {"g-1": lease("l1", "g-1")}, clock=clock)
    assert [m.name for m in v.members] == ["g-1"]


def test_replicas_still_starting_keep_their_first_plan_partitions_for_the_grace() -> None:
    clock = LeaseClock()
    first_plan = {"g-0": ["t-0", "t-1"], "g-1": ["t-2"]}  # nobody was live: everyone got some
    untaken = {"g-0": lease("l0", None, renew=""), "g-2": lease("l2", None, renew="")}
    leases = {**untaken, "g-1": lease("l1", "g-1")}
    pods = [pod(0), pod(1), pod(2)]
    early = view(3, pods, leases, clock=clock, now=100.0, published=first_plan, startup_grace=30.0)
    # g-0 keeps its partitions while it starts; g-2 has none in the plan and joins when it runs
    assert [m.name for m in early.members] == ["g-0", "g-1"]
    renewed = {**leases, "g-1": lease("l1", "g-1", renew="t2")}
    late = view(3, pods, renewed, clock=clock, now=130.0, published=first_plan, startup_grace=30.0)
    assert [m.name for m in late.members] == ["g-1"]
    released = {
        **leases,
        "g-0": {
            **lease("l0", None, renew="r"),
            "metadata": {"name": "l0", "annotations": {"groupops.dev/epoch": "3"}},
        },
    }
    gone = view(3, pods, released, clock=LeaseClock(), now=100.0, published=first_plan, startup_grace=30.0)
    assert [m.name for m in gone.members] == ["g-1"], "a replica that released its Lease is not starting"


def test_a_silent_lease_expires_by_the_operators_clock() -> None:
    clock = LeaseClock()
    leases = {"g-0": lease("l0", "g-0", renew="a"), "g-1": lease("l1", "g-1", renew="a")}
    view(2, [pod(0), pod(1)], leases, clock=clock, now=100.0)
    leases["g-1"] = lease("l1", "g-1", renew="b")
    later = view(2, [pod(0), pod(1)], leases, clock=clock, now=111.0)
    assert later.leases["g-0"].expired
    assert not later.leases["g-1"].expired
    assert [m.name for m in later.members] == ["g-1"]


def test_a_holder_whose_container_exited_is_void_at_once_and_takes_no_part() -> None:
    clock = LeaseClock()
    taken = "2026-11-29T10:00:00.500000Z"
    leases = {identity: lease(f"l{i}", identity, renew="a") for i, identity in enumerate(("g-0", "g-1"))}
    for i, identity in enumerate(("g-0", "g-1")):
        leases[identity]["spec"]["acquireTime"] = taken
        leases[identity]["metadata"]["annotations"]["groupops.dev/incarnation"] = f"x{i}@uid-{i}"
    pods = [pod(0), pod(1)]
    for i, restarted in ((0, "2026-11-29T10:00:07Z"), (1, "2026-11-29T10:00:00Z")):
        pods[i]["metadata"]["uid"] = f"uid-{i}"
        pods[i]["status"]["containerStatuses"] = [
            {"name": "consumer", "state": {"running": {"startedAt": restarted}}}
        ]
    v = view(2, pods, leases, clock=clock, now=100.0)
    assert v.leases["g-0"].exited and v.leases["g-0"].expired, (
        "restarted 6.5 s after its holder took the Lease"
    )
    assert not v.leases["g-1"].exited and v.leases["g-1"].live, "its holder runs in the current container"
    assert [m.name for m in v.members] == ["g-1"]


def test_scale_down_drains_the_highest_ordinals() -> None:
    v = view(2, [pod(0), pod(1), pod(2), pod(3)])
    assert v.draining == {"g-2", "g-3"}
    assert [m.name for m in v.members] == ["g-0", "g-1"]
    assert v.releasable == {"g-2", "g-3"}, "nothing published for them and nobody runs them"


def test_a_draining_identity_with_partitions_is_not_releasable() -> None:
    v = view(1, [pod(0), pod(1)], published={"g-1": [("t", 0)]})
    assert v.releasable == frozenset()


def test_template_change_replaces_one_pod_at_a_time_lowest_first() -> None:
    v = view(3, [pod(0, "old"), pod(1, "old"), pod(2, "new")], template="new")
    assert v.draining == {"g-0"}


def test_a_pod_whose_slot_moved_to_another_zone_is_replaced_like_a_stale_template() -> None:
    placed = [pod(0, zone="a"), pod(1, zone="b"), pod(2, zone="a")]
    assert view(3, placed, zones=("a", "b")).draining == set(), "every pod in its slot's zone"
    assert view(3, placed, zones=("a", "c")).draining == {"g-1"}, "zones [a, b] -> [a, c]: slot 1 moves"
    unlabelled = [pod(0), pod(1), pod(2)]
    assert view(3, unlabelled, zones=("a", "c")).draining == set(), "no label: its zone is not known"
