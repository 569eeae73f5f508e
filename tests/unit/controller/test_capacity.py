"""`spec.consumers.capacity`: parsed and validated by field, carried by the members the planner
gets, weighed by `lag`, and shown per member in status."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from groupops.controller.identities import LeaseClock, identity_view
from groupops.controller.reconcile import PolicyMemory
from groupops.controller.spec import CapacitySpec, SpecError, parse_policy
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.test_reconcile_steps import SPEC, Clock, run

ZONED: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "orders",
    "topics": ["orders"],
    "strategy": {"type": "lag", "rackAware": True},
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3]}}},
    "consumers": {"replicas": 3, "zones": ["a", "b"]},
}


def with_capacity(capacity: Any, **consumers: Any) -> dict[str, Any]:
    spec = copy.deepcopy(ZONED)
    spec["consumers"].update(consumers, capacity=capacity)
    return spec


class TestParsing:
    def test_without_capacity_every_replica_has_one(self) -> None:
        spec = parse_policy({k: v for k, v in ZONED.items()})
        assert spec.consumers.capacity == CapacitySpec()
        assert spec.consumers.capacity.of("orders-0", "a") == 1.0

    def test_identity_wins_over_zone_which_wins_over_default(self) -> None:
        capacity = {"default": 0.5, "byZone": {"a": 2, "b": 3}, "byIdentity": {"orders-2": 4.5}}
        spec = parse_policy(with_capacity(capacity)).consumers.capacity
        assert spec.of("orders-0", "a") == 2.0  # integers are numbers
        assert spec.of("orders-1", "b") == 3.0
        assert spec.of("orders-2", "a") == 4.5
        assert spec.of("orders-0", None) == 0.5

    def test_an_empty_object_is_the_defaults(self) -> None:
        assert parse_policy(with_capacity({})).consumers.capacity == CapacitySpec()


@pytest.mark.parametrize(
    ("capacity", "consumers", "field", "message"),
    [
        pytest.param({"default": 0}, {}, "spec.consumers.capacity.default", "a number > 0", id="zero"),
        pytest.param({"default": -1.5}, {}, "spec.consumers.capacity.default", "got -1.5", id="negative"),
        pytest.param({"default": "2"}, {}, "spec.consumers.capacity.default", "got '2'", id="in-quotes"),
        pytest.param(
            {"default": 1001}, {}, "spec.consumers.capacity.default", "at most 1000", id="too-large"
        ),
        pytest.param(
            {"default": float("nan")},
            {},
            "spec.consumers.capacity.default",
            "a number > 0",
            id="not-a-number",
        ),
        pytest.param(
            {"byIdentity": {"orders-0": 2, "orders-1": 0}},
            {},
            "spec.consumers.capacity.byIdentity.orders-1",
            "got 0",
            id="identity-zero",
        ),
        pytest.param(
            {"byIdentity": {"orders-7": 2}},
            {},
            "spec.consumers.capacity.byIdentity.orders-7",
            "unknown identity 'orders-7': the policy runs orders-0..orders-2",
            id="identity-beyond-replicas",
        ),
        pytest.param(
            {"byIdentity": {"other-0": 2}},
            {},
            "spec.consumers.capacity.byIdentity.other-0",
            "not an identity of group 'orders'",
            id="identity-of-another-group",
        ),
        pytest.param(
            {"byZone": {"a": -1}}, {}, "spec.consumers.capacity.byZone.a", "got -1", id="zone-negative"
        ),
        pytest.param(
            {"byZone": {"c": 2}},
            {},
            "spec.consumers.capacity.byZone.c",
            "unknown zone 'c': spec.consumers.zones lists a, b",
            id="zone-not-listed",
        ),
        pytest.param(
            {"byZone": {"a": 2}},
            {"zones": []},
            "spec.consumers.capacity.byZone.a",
            "set spec.consumers.zones",
            id="zone-without-zones",
        ),
        pytest.param(
            {"perZone": {"a": 2}}, {}, "spec.consumers.capacity.perZone", "unknown field", id="misspelt-field"
        ),
        pytest.param(3, {}, "spec.consumers.capacity", "expected object", id="a-number-not-an-object"),
    ],
)
def test_a_bad_capacity_names_its_field(
    capacity: Any, consumers: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(with_capacity(capacity, **consumers))
    assert caught.value.field == field
    assert message in str(caught.value)


def test_members_carry_their_capacity_by_identity_and_by_zone() -> None:
    capacity = CapacitySpec(default=1.0, by_identity={"g-2": 4.0}, by_zone={"b": 2.0})
    view = identity_view(
        group_id="g",
        replicas=4,
        zones=("a", "b"),
        priorities={},
        capacity=capacity.of,
        template_hash="h",
        pods=[],
        leases={},
        published=None,
        clock=LeaseClock(),
        now=100.0,
        lease_duration=10,
    )
    assert [(m.name, m.rack, m.capacity) for m in view.members] == [
        ("g-0", "a", 1.0),
        ("g-1", "b", 2.0),
        ("g-2", "a", 4.0),  # its own entry wins over its zone's
        ("g-3", "b", 2.0),
    ]


class TestStatus:
    def test_every_member_shows_its_capacity_and_lag_follows_it(self) -> None:
        kube, clock = FakeKube(), Clock()
        spec = copy.deepcopy(SPEC)  # strategy lag, lags 50 40 30 20 10 10 on t
        spec["consumers"] = {"replicas": 2, "capacity": {"byIdentity": {"g-0": 2}}}
        kube.put_policy("ns", "p", spec)
        run(kube, clock, PolicyMemory())
        members = {m["instanceId"]: m for m in kube.policy("ns", "p")["status"]["members"]}
        assert {name: m["capacity"] for name, m in members.items()} == {"g-0": 2.0, "g-1": 1.0}
        # g-0 takes 4 of the 6 partitions and 110 of the lag (55 per capacity), g-1 50
        assert {name: (len(m["partitions"]), m["lag"]) for name, m in members.items()} == {
            "g-0": (4, 110),
            "g-1": (2, 50),
        }

    def test_without_capacity_every_member_shows_one(self) -> None:
        kube, clock = FakeKube(), Clock()
        kube.put_policy("ns", "p", SPEC)
        run(kube, clock, PolicyMemory())
        assert [m["capacity"] for m in kube.policy("ns", "p")["status"]["members"]] == [1.0, 1.0, 1.0]
