"""A standby's watch of the election Lease (controller/leader.py, docs/design.md §8.1): when it
reads the Lease again. While its watch is synced and has shown what the last GET saw, it waits
until the last version is a Lease duration old; a step-down or a deletion is looked at at once;
a watch out of sync, one a GET found behind, or a refused take falls back to a GET every retry."""

from __future__ import annotations

import time
from typing import Any

import pytest

from groupops.controller.leader import LeaderElector
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import Conflict

LEASE_S, RETRY_S = 5.0, 1.0


def lease(version: str, holder: str = "leader") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "groupops-operator", "namespace": "ops", "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 5, "leaseTransitions": 3},
    }


class Server:
    """The API server as the standby's GET and PUT see it."""

    def __init__(self) -> None:
        self.current = lease("1")
        self.conflict = False
        self.gets = 0

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.current

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.conflict:
            raise Conflict("the object has been modified", status=409)
        return body


class Watch:
    def __init__(self, synced: bool = True) -> None:
        self.is_synced = synced

    def synced(self) -> bool:
        return self.is_synced


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def standby(server: Server) -> LeaderElector:
    settings = ElectionSettings(
        namespace="ops",
        identity="standby",
        lease_seconds=LEASE_S,
        renew_deadline_seconds=3.5,
        retry_seconds=RETRY_S,
    )
    return LeaderElector(server, settings)  # type: ignore[arg-type]


def test_a_synced_watch_that_showed_what_the_get_saw_waits_for_the_lease_duration(
    server: Server, standby: LeaderElector
) -> None:
    standby._heard("ADDED", lease("1"))
    assert not standby._try_take()
    polled = time.monotonic()
    wait = standby._look_in(Watch(), polled)
    assert LEASE_S - 0.5 < wait <= LEASE_S, "no GET before the version is a Lease duration old"

    standby._heard("MODIFIED", lease("2"))  # a renewal: the wait starts again, no GET needed
    assert LEASE_S - 0.5 < standby._look_in(Watch(), polled) <= LEASE_S
    assert server.gets == 1


def test_a_watch_a_get_found_behind_falls_back_to_polling_until_it_shows_news(
    server: Server, standby: LeaderElector
) -> None:
    standby._heard("ADDED", lease("1"))
    server.current = lease("7")  # renewed, and the stalled watch never showed it
    assert not standby._try_take()
    polled = time.monotonic()
    assert 0 < standby._look_in(Watch(), polled) <= RETRY_S, "a GET every retry, not a busy loop"
    standby._heard("MODIFIED", lease("7"))
    assert standby._look_in(Watch(), polled) > RETRY_S


def test_a_watch_out_of_sync_polls_every_retry(standby: LeaderElector) -> None:
    standby._heard("ADDED", lease("1"))
    assert not standby._try_take()
    assert 0 < standby._look_in(Watch(synced=False), time.monotonic()) <= RETRY_S


def test_a_step_down_or_a_deletion_is_looked_at_at_once(standby: LeaderElector) -> None:
    standby._heard("ADDED", lease("1"))
    assert not standby._try_take()
    standby._heard("MODIFIED", lease("2", holder=""))
    assert standby._look_in(Watch(), time.monotonic()) <= 0
    standby._heard("DELETED", lease("2", holder=""))
    assert standby._look_in(Watch(), time.monotonic()) <= 0
    assert standby.leader_address is None


def test_a_take_refused_by_a_conflict_reads_again_with_a_get(server: Server, standby: LeaderElector) -> None:
    server.current = lease("1", holder="")  # stepped down: taken at once, but someone was first
    server.conflict = True
    standby._heard("ADDED", server.current)
    assert not standby._try_take()
    assert 0 < standby._look_in(Watch(), time.monotonic()) <= RETRY_S
