"""The Lease keeper's protocol decisions, against an in-memory Lease store with the API server's
compare-and-swap rule (a write must carry the stored resourceVersion). The real API server is
exercised by the integration and e2e tests; here every branch is driven deliberately."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from groupops.consumer.lease import LeaseKeeper
from groupops.consumer.settings import LeaseSettings
from groupops.kubeapi import AlreadyExists, Conflict, Forbidden, NotFound, Transient
from groupops.model import TopicPartition
from groupops.planner.plan_format import LeaseState, fence_annotations, lease_record

NAME = "orders-g-0"


class LeaseStore:
    """One namespace's Leases with resourceVersion compare-and-swap."""

    namespace = "ns"

    def __init__(self, *, may_create: bool = True) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.may_create = may_create
        self.down = False

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def get_lease(self, name: str) -> dict[str, Any] | None:
        if self.down:
            raise Transient("down")
        found = self.objects.get(name)
        return None if found is None else copy.deepcopy(found)

    def create_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.may_create:
            raise Forbidden("create leases is forbidden", status=403)
        if body["metadata"]["name"] in self.objects:
            raise AlreadyExists("exists", status=409, reason="AlreadyExists")
        return self._stored(body)

    def update_lease(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise Transient("down")
        current = self.objects.get(body["metadata"]["name"])
        if current is None:
            raise NotFound("gone", status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("conflict", status=409)
        return self._stored(body)

    def operator_creates(self) -> None:
        self._stored(
            {
                "metadata": {
                    "name": NAME,
                    "labels": {"groupops.dev/policy": "orders"},
                    "ownerReferences": [{"kind": "ConsumerGroupPolicy", "name": "orders", "uid": "u1"}],
                    "annotations": {"operator.example/note": "keep me"},
                },
                "spec": {"leaseDurationSeconds": 4},
            }
        )

    def operator_fences(self, epoch: int) -> None:
        lease = self.objects[NAME]
        lease["metadata"]["annotations"] = {**lease["metadata"]["annotations"], **fence_annotations(epoch)}
        self._stored(lease)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


SETTINGS = LeaseSettings(duration_s=4, renew_interval_s=1.0, renew_deadline_s=3.0, request_timeout_s=1.0)


def keeper(store: LeaseStore, clock: Clock, incarnation: str = "aaaa") -> LeaseKeeper:
    return LeaseKeeper(
        store,  # type: ignore[arg-type]
        SETTINGS,
        name=NAME,
        policy="orders",
        identity="g-0",
        incarnation=incarnation,
        monotonic=clock,
        wall=lambda: 1_700_000_000.0 + clock.now,
    )


def annotations(store: LeaseStore) -> dict[str, str]:
    return dict(store.objects[NAME]["metadata"]["annotations"])


def test_an_unheld_lease_made_by_the_operator_is_taken_at_once_keeping_its_metadata() -> None:
    store, clock = LeaseStore(may_create=False), Clock()
    store.operator_creates()
    k = keeper(store, clock)
    assert k.acquire(threading.Event())
    stored = store.objects[NAME]
    assert stored["spec"]["holderIdentity"] == "g-0"
    assert stored["spec"]["leaseTransitions"] == 1
    assert stored["metadata"]["ownerReferences"][0]["name"] == "orders"
    assert annotations(store)["operator.example/note"] == "keep me"
    assert lease_record(annotations(store)).incarnation == "aaaa"
    assert k.valid_until == pytest.approx(100.0 + SETTINGS.renew_deadline_s)


def test_validity_counts_from_when_the_renewal_was_sent() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    assert k.acquire(threading.Event())
    clock.now = 102.0
    assert k.valid()
    clock.now = 103.5
    assert not k.valid()
    assert k.renew_once()
    assert k.valid_until == pytest.approx(103.5 + SETTINGS.renew_deadline_s)


def test_a_renewal_sent_after_validity_ran_out_counts_a_lapse() -> None:
    """A process frozen past its validity may first be woken by a renewal (or a granted heartbeat)
    that makes it valid again: the lapse in between is counted, so the runtime fences instead of
    releasing partitions that may have moved meanwhile (consumer/runtime.py, rule 2)."""
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    assert k.acquire(threading.Event())
    assert k.lapses == 0, "the first take follows no validity"
    clock.now = 102.9
    assert k.renew_once()
    assert k.lapses == 0, "renewed in time"
    clock.now = 102.9 + SETTINGS.renew_deadline_s + 7.0  # frozen for 7 s past the deadline
    assert k.renew_once()
    assert k.valid()
    assert k.lapses == 1


def test_a_failed_renewal_does_not_extend_validity() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    k.acquire(threading.Event())
    store.down = True
    clock.now = 101.0
    assert not k.renew_once()
    assert k.valid_until == pytest.approx(100.0 + SETTINGS.renew_deadline_s)


def test_the_report_is_written_with_the_next_renewal() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    k.acquire(threading.Event())
    k.report(
        acked_epoch=7, partitions=(TopicPartition("t", 1), TopicPartition("t", 0)), state=LeaseState.ACTIVE
    )
    assert k.renew_once()
    record = lease_record(annotations(store))
    assert record.acked_epoch == 7
    assert record.partitions == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert record.state is LeaseState.ACTIVE


def test_a_fence_by_the_operator_raises_the_floor_and_is_kept_on_the_lease() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    k.acquire(threading.Event())
    k.report(acked_epoch=5, partitions=(TopicPartition("t", 0),), state=LeaseState.ACTIVE)
    k.renew_once()
    store.operator_fences(5)
    clock.now = 101.0
    assert k.renew_once(), "after the conflict it renews on the fresh object"
    assert k.floor == 5
    assert lease_record(annotations(store)).released_through == 5


def test_another_process_taking_the_lease_means_this_one_lost_it() -> None:
    store, clock = LeaseStore(), Clock()
    first = keeper(store, clock, "first")
    first.acquire(threading.Event())
    lease = store.objects[NAME]
    lease["metadata"]["annotations"] = {
        **lease["metadata"]["annotations"],
        "groupops.dev/incarnation": "second",
    }
    store._stored(lease)
    assert not first.renew_once()
    assert first.lost
    assert not first.valid()


def test_a_second_process_waits_a_full_duration_of_silence_before_taking_over() -> None:
    store, clock = LeaseStore(), Clock()
    first = keeper(store, clock, "first")
    first.acquire(threading.Event())
    second = keeper(store, clock, "second")
    stop = threading.Event()
    attempts: list[bool] = []

    def fake_wait(seconds: float) -> bool:
        clock.now += 1.0
        if clock.now < 103.0:
            first.renew_once()  # the first is alive for a while: the wait starts over
        attempts.append(True)
        return len(attempts) > 20

    stop.wait = fake_wait  # type: ignore[method-assign]
    assert second.acquire(stop)
    assert clock.now >= 102.0 + SETTINGS.duration_s
    assert lease_record(annotations(store)).incarnation == "second"


def test_a_released_lease_is_taken_at_once_and_its_floor_is_honoured() -> None:
    store, clock = LeaseStore(), Clock()
    first = keeper(store, clock, "first")
    first.acquire(threading.Event())
    assert first.release(through=9, acked_epoch=8)
    stored = store.objects[NAME]
    assert "holderIdentity" not in stored["spec"]
    record = lease_record(annotations(store))
    assert record.state is LeaseState.RELEASED
    assert record.released_through == 9
    assert record.partitions == ()
    second = keeper(store, clock, "second")
    assert second.acquire(threading.Event())
    assert second.floor == 9


def test_a_new_process_never_applies_a_plan_older_than_its_identity_acknowledged() -> None:
    """The crashed process acknowledged epoch 8 (the operator may since have granted what 8 took
    from it elsewhere); its successor may re-apply 8, nothing older, and says so on the Lease."""
    store, clock = LeaseStore(), Clock()
    first = keeper(store, clock, "first")
    first.acquire(threading.Event())
    first.report(acked_epoch=8, partitions=(TopicPartition("t", 0),), state=LeaseState.ACTIVE)
    assert first.renew_once()
    clock.now += SETTINGS.duration_s + 1.0  # the first process died; its Lease went silent
    second = keeper(store, clock, "second")
    stop = threading.Event()
    stop.wait = lambda seconds: bool(setattr(clock, "now", clock.now + seconds))  # type: ignore[method-assign]
    assert second.acquire(stop)
    assert second.floor == 7
    record = lease_record(annotations(store))
    assert record.incarnation == "second"
    assert record.released_through == 7
    assert record.acked_epoch is None


def test_its_own_acknowledgement_does_not_raise_a_process_floor() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    k.acquire(threading.Event())
    k.report(acked_epoch=8, partitions=(TopicPartition("t", 0),), state=LeaseState.ACTIVE)
    assert k.renew_once()
    assert k.acquire(threading.Event())
    assert k.floor == -1


def test_without_create_permission_it_waits_for_the_operator() -> None:
    store, clock = LeaseStore(may_create=False), Clock()
    k = keeper(store, clock)
    stop = threading.Event()
    waits: list[float] = []

    def fake_wait(seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) == 2:
            store.operator_creates()
        return len(waits) > 10

    stop.wait = fake_wait  # type: ignore[method-assign]
    assert k.acquire(stop)
    assert len(waits) == 2


def test_a_process_stopped_while_waiting_releases_nothing_of_another() -> None:
    store, clock = LeaseStore(), Clock()
    first = keeper(store, clock, "first")
    first.acquire(threading.Event())
    second = keeper(store, clock, "second")
    stop = threading.Event()
    stop.set()
    assert not second.acquire(stop)
    assert not second.release(through=3, acked_epoch=None)
    assert lease_record(annotations(store)).incarnation == "first"
    assert store.objects[NAME]["spec"]["holderIdentity"] == "g-0"
