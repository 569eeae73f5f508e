"""The Lease keeper's heartbeats carry the replica's progress, and a heartbeat the operator refuses
as stuck makes the keeper surrender instead of writing its Lease (docs/design.md §7.5, rule 5):
a Lease write would keep a stuck replica valid for ever."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from groupops.consumer.lease import LeaseKeeper
from groupops.planner.liveness import Heartbeat, HeartbeatAnswer, HeartbeatStatus
from tests.unit.consumer.test_consumer_lease import NAME, SETTINGS, LeaseStore
from tests.unit.consumer.test_heartbeat_client import ScriptedOperator


def keeper(store: LeaseStore, operator: ScriptedOperator, progress: dict[str, float]) -> LeaseKeeper:
    judged: list[str] = []
    keeper = LeaseKeeper(
        store,  # type: ignore[arg-type]
        replace(SETTINGS, heartbeat_addresses=(operator.address,)),
        name=NAME,
        policy="orders",
        identity="g-0",
        incarnation="aaaa",
        progress=lambda: dict(progress),
        on_stuck=judged.append,
    )
    keeper.judged = judged  # type: ignore[attr-defined]
    return keeper


def answering(stuck_after: int) -> Any:
    def script(heartbeat: Heartbeat, received: int) -> HeartbeatAnswer:
        if received > stuck_after:
            return HeartbeatAnswer(
                seq=heartbeat.seq, status=HeartbeatStatus.REFUSED, reason="stuck: too long", stuck=True
            )
        return HeartbeatAnswer(seq=heartbeat.seq, status=HeartbeatStatus.GRANTED, valid=3.0)

    return script


def test_heartbeats_carry_the_progress_and_a_stuck_refusal_surrenders_without_a_lease_write() -> None:
    store = LeaseStore()
    operator = ScriptedOperator(answering(stuck_after=1))
    progress = {"poll": 0.2, "commit": 0.9}
    replica = keeper(store, operator, progress)
    try:
        assert replica.acquire(threading.Event())
        assert replica.beat_once() and replica.valid()
        assert operator.received[-1].progress == {"poll": 0.2, "commit": 0.9}
        version = store.objects[NAME]["metadata"]["resourceVersion"]
        progress["poll"] = 42.0
        assert not replica.beat_once()
        assert operator.received[-1].progress["poll"] == 42.0
        assert not replica.valid(), "refused as stuck: not valid any more, at once"
        assert replica.judged == ["stuck: too long"]  # type: ignore[attr-defined]
        assert not replica.renew_once(), "a surrendered keeper writes nothing"
        assert store.objects[NAME]["metadata"]["resourceVersion"] == version
    finally:
        replica.stop()
        operator.close()


def test_a_plain_refusal_still_falls_back_to_a_lease_write() -> None:
    store = LeaseStore()
    operator = ScriptedOperator(
        lambda heartbeat, _: HeartbeatAnswer(seq=heartbeat.seq, status=HeartbeatStatus.REFUSED, reason="no")
    )
    replica = keeper(store, operator, {"poll": 0.1})
    try:
        assert replica.acquire(threading.Event())
        assert not replica.beat_once()
        assert replica.renew_once() and replica.valid()
        assert replica.judged == []  # type: ignore[attr-defined]
    finally:
        replica.stop()
        operator.close()
